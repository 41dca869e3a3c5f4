"""Deploy checks of labeling's database: autovacuum keeps the next-task search short.

Registered by labeling.apps.LabelingConfig.ready(); they run with
``manage.py check --deploy --database default`` (docs/operations.md,
"Autovacuum"). Like Django's own database checks they read only the databases
named with ``--database``: a plain ``check`` on a build machine, where the
production database cannot be reached, stays quiet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Tags, Warning, register
from django.db import DatabaseError, connections

# What migration 0017 sets on the queue tables (it keeps its own copy, as a
# migration must; a change of these is a new migration). A finished task
# leaves a dead row version in both tables, and its old entry at the front
# of task_queue_idx until a vacuum: vacuum after about a thousand of them,
# not after a fifth of the table (the cluster default).
QUEUE_TABLE_AUTOVACUUM: dict[str, dict[str, str]] = {
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

HINT = 'docs/operations.md, "Autovacuum"'


@register(Tags.database, deploy=True)
def check_queue_autovacuum(
    app_configs: Sequence[AppConfig] | None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_setting('autovacuum'), current_setting('track_counts')")
                autovacuum, track_counts = cursor.fetchone()
                cursor.execute(
                    "SELECT relname, reloptions FROM pg_class WHERE oid = ANY(%s::regclass[])",
                    [list(QUEUE_TABLE_AUTOVACUUM)],
                )
                reloptions = {name: dict(o.split("=", 1) for o in options or []) for name, options in cursor.fetchall()}
        except DatabaseError as error:
            message = f"Could not read the autovacuum settings of database '{alias}': {error}".strip()
            messages.append(Warning(message, hint=HINT, id="labeling.W003"))
            continue
        if autovacuum != "on" or track_counts != "on":
            messages.append(
                Warning(
                    f"Autovacuum does not run on database '{alias}' (autovacuum = {autovacuum},"
                    f" track_counts = {track_counts}): every task handed out makes the next hand-out slower.",
                    hint=f"Set autovacuum = on and track_counts = on in postgresql.conf ({HINT}).",
                    id="labeling.W001",
                )
            )
        for table, wanted in QUEUE_TABLE_AUTOVACUUM.items():
            have = reloptions.get(table, {})
            off = have.get("autovacuum_enabled", "true").lower() in ("false", "off", "0", "no")
            # A table tuned further still (a lower threshold) is fine.
            missing = [f"{name} = {value}" for name, value in wanted.items()
                       if name not in have or float(have[name]) > float(value)]  # fmt: skip
            if off or missing:
                problem = "autovacuum_enabled = off" if off else f"wants at most: {', '.join(missing)}"
                messages.append(
                    Warning(
                        f"The queue table {table} on database '{alias}' lacks its autovacuum settings ({problem}).",
                        hint=f"Run manage.py migrate (labeling 0017 sets them), or ALTER TABLE {table} RESET"
                        f" (autovacuum_enabled) ({HINT}).",
                        id="labeling.W002",
                    )
                )
    return messages
