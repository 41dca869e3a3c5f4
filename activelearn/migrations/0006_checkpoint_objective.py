# What a checkpoint was trained to predict: human step labels (a PRM) or final-answer
# verdicts (an ORM). Every existing row is a PRM, which the default gives it.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("activelearn", "0005_checkpoint_run_id"),
    ]

    operations = [
        migrations.AddField(
            model_name="prmcheckpoint",
            name="objective",
            field=models.CharField(choices=[("process", "PRM"), ("outcome", "ORM")], default="process", max_length=10),
        ),
        migrations.AddConstraint(
            model_name="prmcheckpoint",
            constraint=models.CheckConstraint(
                condition=models.Q(("objective__in", ["process", "outcome"])), name="prm_checkpoint_objective_known"
            ),
        ),
    ]
