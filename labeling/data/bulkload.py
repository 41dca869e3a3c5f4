"""Fast bulk inserts for imports at release scale.

On PostgreSQL rows go in through COPY with ids taken from the table's
sequence beforehand (so children can point at parents without a round trip
per row); elsewhere through ``bulk_create``. Both run inside the caller's
transaction, so an import stays all-or-nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, models
from django.utils import timezone


def _columns(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def insert_rows(model: type[models.Model], rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert rows given as {attname: value}; missing fields take their defaults. Returns the new ids."""
    if not rows:
        return []
    if connection.vendor != "postgresql":
        created = model._default_manager.bulk_create([model(**row) for row in rows])
        return [int(obj.pk) for obj in created]
    fields = _columns(model)
    now = timezone.now()
    defaults = {
        f.attname: now if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False) else f.get_default()
        for f in fields
    }
    for row in rows:
        unknown = row.keys() - defaults.keys()
        if unknown:
            raise ValueError(f"{model.__name__} has no field(s) {sorted(unknown)}")
    table = model._meta.db_table
    pk = model._meta.pk
    assert pk is not None
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [table, pk.column, len(rows)],
        )
        ids = [int(r[0]) for r in cursor.fetchall()]
        columns = ", ".join(quote(c) for c in [pk.column, *(f.column for f in fields)])
        # psycopg adapts plain values (str, int, bool, datetime, None) itself;
        # only fields with their own database representation (JSON) need the
        # field's adaptation, which is too slow to run on every value.
        adapted = {f.attname for f in fields if isinstance(f, models.JSONField | models.UUIDField)}
        with cursor.cursor.copy(f"COPY {quote(table)} ({columns}) FROM STDIN") as copy:
            for new_id, row in zip(ids, rows, strict=True):
                values = [new_id]
                for f in fields:
                    value = row.get(f.attname, defaults[f.attname])
                    values.append(f.get_db_prep_save(value, connection) if f.attname in adapted else value)
                copy.write_row(values)
    return ids
