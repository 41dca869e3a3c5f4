"""The rolling QC window a labeler last passed (a digest), so that a hand-out judges an unchanged window once.

Empty for everyone at first: each active labeler's next hand-out judges their
window as before and records it. The column keeps its default in the
database, so web processes older than this migration still create labelers
until they restart; on PostgreSQL it is added without rewriting the table.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0013_assignment_task_kind_known"),
    ]

    operations = [
        migrations.AddField(
            model_name="labeler",
            name="qc_window_passed",
            field=models.CharField(blank=True, default="", db_default="", editable=False, max_length=32),
        ),
    ]
