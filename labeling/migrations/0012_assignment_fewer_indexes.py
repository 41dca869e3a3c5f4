"""Assignments lose three indexes that no query needs and every write of a row pays for (see the model).

On PostgreSQL the table also keeps a tenth of each new page free
(fillfactor 90): a key press rewrites its assignment's row (time on task,
lease, version), none of whose changed columns is indexed now, so the new
row version can stay on its page as a heap-only tuple, with no index written
at all, when the page has room for it.

The foreign keys' own indexes are dropped by name, found by introspection:
Django's AlterField to db_index=False would drop every plain index on the
column, assignment_one_in_progress_per_labeler (a unique partial index on
labeler_id) among them.
"""

import django.db.models.deletion
from django.db import migrations, models

_COLUMNS = (["task_id"], ["labeler_id"])


def _single_column_indexes(schema_editor, model):  # type: ignore[no-untyped-def]
    # The indexes Django made for the foreign keys: one column, not unique,
    # not named by the model (its Meta indexes and constraints have names).
    named = {i.name for i in model._meta.indexes} | {c.name for c in model._meta.constraints}
    with schema_editor.connection.cursor() as cursor:
        constraints = schema_editor.connection.introspection.get_constraints(cursor, model._meta.db_table)
    return [
        name
        for name, info in constraints.items()
        if info["index"]
        and not info["unique"]
        and not info["primary_key"]
        and info["columns"] in _COLUMNS
        and name not in named
    ]


def drop_the_foreign_key_indexes(apps, schema_editor):  # type: ignore[no-untyped-def]
    model = apps.get_model("labeling", "Assignment")
    for name in _single_column_indexes(schema_editor, model):
        schema_editor.execute(schema_editor._delete_index_sql(model, name))


def make_them_again(apps, schema_editor):  # type: ignore[no-untyped-def]
    model = apps.get_model("labeling", "Assignment")
    for field in ("task", "labeler"):
        column = model._meta.get_field(field).column
        schema_editor.execute(
            schema_editor._create_index_sql(
                model,
                fields=[model._meta.get_field(field)],
                name=schema_editor._create_index_name(model._meta.db_table, [column]),
            )
        )


def leave_room_on_each_page(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE labeling_assignment SET (fillfactor = 90)")


def fill_pages_again(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE labeling_assignment RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("labeling", "0011_assignment_task_kind"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="assignment",
            name="assignment_live_lease_idx",
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="assignment",
                    name="labeler",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="assignments",
                        to="labeling.labeler",
                    ),
                ),
                migrations.AlterField(
                    model_name="assignment",
                    name="task",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="assignments",
                        to="labeling.task",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop_the_foreign_key_indexes, make_them_again)],
        ),
        migrations.RunPython(leave_room_on_each_page, fill_pages_again),
    ]
