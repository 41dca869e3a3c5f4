"""Assignments carry their task's kind, and a labeler's finished QC items get their own index (the rolling QC window)."""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def copy_the_task_kinds(apps, schema_editor):  # type: ignore[no-untyped-def]
    Assignment = apps.get_model("labeling", "Assignment")
    Task = apps.get_model("labeling", "Task")
    # Every assignment was added as "normal"; only the others need a write.
    kind = Task.objects.filter(pk=OuterRef("task_id")).values("kind")[:1]
    Assignment.objects.filter(task__kind__in=["quality_control", "screening"]).update(task_kind=Subquery(kind))


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0010_assignment_state_version"),
    ]

    operations = [
        migrations.AddField(
            model_name="assignment",
            name="task_kind",
            field=models.CharField(
                choices=[("normal", "normal"), ("quality_control", "quality control"), ("screening", "screening")],
                default="normal",
                editable=False,
                max_length=20,
            ),
            preserve_default=False,
        ),
        migrations.RunPython(copy_the_task_kinds, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="assignment",
            index=models.Index(
                condition=models.Q(("status__in", ["submitted", "expired"]), ("task_kind", "quality_control")),
                fields=["labeler", "-started_at", "-id"],
                name="assignment_qc_window_idx",
            ),
        ),
    ]
