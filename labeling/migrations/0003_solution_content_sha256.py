"""Solution identity covers the final answer as well as the steps.

Two records of the PRM800K release may carry the same steps with different
pre_generated_answer values; both must survive an import unchanged.
"""

import hashlib

from django.db import migrations, models


def _content_sha256(steps, final_answer):
    parts = ["\x01" if steps is None else "\x00".join(steps), "\x01" if final_answer is None else final_answer]
    return hashlib.sha256("\x02".join(parts).encode("utf-8")).hexdigest()


def recompute(apps, schema_editor):
    Solution = apps.get_model("labeling", "Solution")
    batch = []
    for solution in Solution.objects.only("id", "steps", "final_answer").iterator(chunk_size=2000):
        solution.content_sha256 = _content_sha256(solution.steps, solution.final_answer)
        batch.append(solution)
        if len(batch) >= 2000:
            Solution.objects.bulk_update(batch, ["content_sha256"])
            batch = []
    Solution.objects.bulk_update(batch, ["content_sha256"])


class Migration(migrations.Migration):
    dependencies = [("labeling", "0002_labeler_workflow")]

    operations = [
        migrations.RemoveConstraint(model_name="solution", name="solution_unique_per_problem"),
        migrations.RenameField(model_name="solution", old_name="steps_sha256", new_name="content_sha256"),
        migrations.RunPython(recompute, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="solution",
            constraint=models.UniqueConstraint(
                fields=("problem", "content_sha256", "source_model"), name="solution_unique_per_problem"
            ),
        ),
    ]
