"""Solutions keep where they came from: the generator and the sample's id in it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0008_problem_split_validation"),
    ]

    operations = [
        migrations.AddField(
            model_name="solution",
            name="generator",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="solution",
            name="source_key",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
        migrations.AddConstraint(
            model_name="solution",
            constraint=models.UniqueConstraint(
                condition=models.Q(("source_key", ""), _negated=True),
                fields=("problem", "generator", "source_key"),
                name="solution_source_key_unique",
            ),
        ),
    ]
