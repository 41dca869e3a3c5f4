# A unique random id per training run. Existing rows each get their own id: an
# AddField with a callable default would give every existing row the same value.

import uuid

from django.db import migrations, models


def fill_run_ids(apps, schema_editor):
    PRMCheckpoint = apps.get_model("activelearn", "PRMCheckpoint")
    for checkpoint in PRMCheckpoint.objects.only("pk").iterator():
        PRMCheckpoint.objects.filter(pk=checkpoint.pk).update(run_id=uuid.uuid4())


class Migration(migrations.Migration):
    dependencies = [
        ("activelearn", "0004_checkpoint_calibration"),
    ]

    operations = [
        migrations.AddField(
            model_name="prmcheckpoint",
            name="run_id",
            field=models.UUIDField(null=True, editable=False),
        ),
        migrations.RunPython(fill_run_ids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="prmcheckpoint",
            name="run_id",
            field=models.UUIDField(default=uuid.uuid4, editable=False),
        ),
        migrations.AddConstraint(
            model_name="prmcheckpoint",
            constraint=models.UniqueConstraint(fields=("run_id",), name="prm_checkpoint_run_id_unique"),
        ),
    ]
