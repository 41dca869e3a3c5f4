"""A bulk insert that leaves out an assignment's task kind is refused (the kind feeds the rolling QC window)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0012_assignment_fewer_indexes"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="assignment",
            constraint=models.CheckConstraint(
                condition=models.Q(("task_kind__in", ["normal", "quality_control", "screening"])),
                name="assignment_task_kind_known",
            ),
        ),
    ]
