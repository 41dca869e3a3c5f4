"""The queue tables get autovacuum thresholds of their own (PostgreSQL; nothing elsewhere).

Every task finished leaves a dead row version in labeling_task and one in
labeling_assignment (the status columns are indexed, so those updates are
not heap-only), and each leaves an index entry at the front of the queue
that the next-task search steps over until a vacuum removes it. The cluster
default vacuums a table once a fifth of it is dead: on a queue of a million
tasks, after 200k tasks handed out. These settings vacuum after about a
thousand finished tasks, whatever the table's size (docs/operations.md,
"Autovacuum"). labeling.checks.QUEUE_TABLE_AUTOVACUUM holds the same values
for the deploy check; a change of them is a new migration.
"""

from django.db import migrations

SETTINGS = {
    "labeling_task": {
        "autovacuum_vacuum_scale_factor": "0",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_analyze_scale_factor": "0.02",
    },
    "labeling_assignment": {
        "autovacuum_vacuum_scale_factor": "0",
        "autovacuum_vacuum_threshold": "1000",
        "autovacuum_analyze_scale_factor": "0.02",
    },
}


def tune(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, options in SETTINGS.items():
        values = ", ".join(f"{name} = {value}" for name, value in options.items())
        schema_editor.execute(f"ALTER TABLE {table} SET ({values})")


def untune(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, options in SETTINGS.items():
        schema_editor.execute(f"ALTER TABLE {table} RESET ({', '.join(options)})")


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0016_generation_sampling_status"),
    ]

    operations = [migrations.RunPython(tune, untune)]
