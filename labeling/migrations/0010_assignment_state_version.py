"""Assignments get a state version that every change increments; existing ones start at their highest rating version."""

from django.db import migrations, models
from django.db.models import F, Max, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce, Greatest


def start_at_the_stored_versions(apps, schema_editor):  # type: ignore[no-untyped-def]
    Assignment = apps.get_model("labeling", "Assignment")
    StepRating = apps.get_model("labeling", "StepRating")
    highest = (
        StepRating.objects.filter(step__assignment_id=OuterRef("pk"))
        .order_by()
        .values("step__assignment_id")
        .annotate(v=Max("version"))
        .values("v")
    )
    Assignment.objects.update(version=Greatest(F("ratings_reset_version"), Coalesce(Subquery(highest[:1]), Value(0))))


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0009_solution_provenance"),
    ]

    operations = [
        migrations.AddField(
            model_name="assignment",
            name="version",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(start_at_the_stored_versions, migrations.RunPython.noop),
    ]
