"""Labeler records for signed-in users, who may take work, and status changes."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import connection, transaction
from django.utils import timezone

from annotate.postgresql import statement_sent
from labeling.models import Assignment, AssignmentStatus, Labeler, LabelerStatus, LabelerStatusEvent

# The statuses that may be handed tasks at all. SCREENING labelers are handed
# only screening items (labeling.work.queue); ACTIVE ones normal work and QC items.
_MAY_TAKE_WORK = frozenset({LabelerStatus.SCREENING, LabelerStatus.ACTIVE})


def labeler_for_user(*, user: AbstractBaseUser) -> Labeler:
    """The user's Labeler, created on first visit (status: the model default).

    Read at most once per user object (so once per request): the result is
    kept in the user's relation cache, where ``user.labeler`` finds it too. It
    is not joined into the sign-in's user query: a rating, the most frequent
    request, never needs it, and the join cost more Python than the separate
    query saves.
    """
    cache: dict[str, object] = user._state.fields_cache
    cached = cache.get("labeler")
    if isinstance(cached, Labeler):
        return cached
    labeler = _labeler_of_user(user.pk)
    if labeler is None:
        # get_or_create retries the get after an IntegrityError, so two first
        # requests of the same user at the same moment end with one row.
        labeler, _created = Labeler.objects.get_or_create(user=user)
    cache["labeler"] = labeler
    return labeler


# The labeler row of a user, every column, by the unique user id. Written out
# because every submit + next reads it, and the ORM's get cost about 1 ms of
# CPU to build where the statement costs a fifth of that.
LABELER_OF_USER = "SELECT {columns} FROM labeling_labeler WHERE user_id = %s"


def labeler_select(*, alias: str = "", prefix: str = "") -> str:
    """Every column of the labeler row, in labeler_from_row's order, for a statement that reads it beside others.

    ``alias``: the table's alias in that statement; ``prefix``: put before
    each column's name in the answer.
    """
    return _labeler_columns(connection.vendor, alias, prefix)


def labeler_from_row(values: Sequence[Any]) -> Labeler:
    """The Labeler of a row's labeler_select columns, converted as the ORM converts them.

    SQLite hands back datetimes as text and UUIDs as hex.
    """
    columns, converters = _labeler_converters(connection.vendor)
    converted = []
    for value, (col, convert) in zip(values, converters, strict=True):
        for converter in convert:
            value = converter(value, col, connection)
        converted.append(value)
    return Labeler.from_db(connection.alias, columns, converted)


@functools.cache
def _labeler_columns(vendor: str, alias: str, prefix: str) -> str:
    # Per backend vendor and use, built once.
    table = f"{connection.ops.quote_name(alias)}." if alias else ""
    return ", ".join(
        f"{table}{connection.ops.quote_name(f.column)}" + (f" AS {prefix}{f.column}" if prefix else "")
        for f in Labeler._meta.concrete_fields
    )


@functools.cache
def _labeler_converters(vendor: str) -> tuple[list[str], list[tuple[Any, list[Any]]]]:
    # Each column's converters as the ORM applies them; per backend vendor, built once.
    fields = Labeler._meta.concrete_fields
    converters = []
    for field in fields:
        col = field.get_col(Labeler._meta.db_table)
        converters.append((col, connection.ops.get_db_converters(col) + col.get_db_converters(connection)))
    return [f.attname for f in fields], converters


def labeler_of_user_sent(*, user_id: Any) -> Callable[[], Labeler | None]:
    """The labeler row of a user, sent now; the function returned reads it (None: no row), once.

    Inside labeling.work.hotpath.pipelined() it travels with the statements
    sent after it (annotate.postgresql.statement_sent).
    """

    def read(cursor: Any) -> Labeler | None:
        row = cursor.fetchone()
        return None if row is None else labeler_from_row(row)

    # Prepared on PostgreSQL (annotate.postgresql): by the unique user id, one plan for everyone.
    return statement_sent(connection, LABELER_OF_USER.format(columns=labeler_select()), [user_id], read)


def _labeler_of_user(user_id: Any) -> Labeler | None:
    return labeler_of_user_sent(user_id=user_id)()


def labeler_peek(*, user: AbstractBaseUser) -> Labeler:
    """The user's Labeler for a page that only shows it: the stored row, or an unsaved one.

    Looking at a page never creates rows (an admin visiting ``/`` is no labeler);
    the row is made when the person asks for work (``labeler_for_user``).
    """
    labeler = Labeler.objects.filter(user_id=user.pk).first()
    return labeler if labeler is not None else Labeler(user_id=user.pk)


def labeler_can_take_work(labeler: Labeler) -> bool:
    """The one place that decides whether a labeler is handed tasks."""
    return labeler.status in _MAY_TAKE_WORK


def labeler_needs_screening(labeler: Labeler) -> bool:
    """Whether the labeler may be handed screening items only (never normal or QC work)."""
    return labeler.status == LabelerStatus.SCREENING


def labeler_set_status(
    *,
    labeler: Labeler,
    status: LabelerStatus,
    reason: str,
    changed_by: User | None = None,
    expected: Collection[str] | None = None,
    exclude_labels: bool | None = None,
    now: datetime | None = None,
) -> bool:
    """Change a labeler's status (admission, failure, suspension, admin override); True if changed.

    ``expected``: change only from one of these statuses (automatic changes
    pass it, so they never undo an admin's decision made a moment earlier).
    A labeler leaving a status loses their in-progress lease: the assignment
    is marked EXPIRED (kept for audit, not exported) and its task goes back to
    the queue, so a suspended person cannot keep rating an open task. The
    ``labeler`` instance is updated in place.
    """
    now = now or timezone.now()
    with transaction.atomic():
        # The labeler row is the lock that serialises status changes with each
        # other and with hand-outs (labeling.work.queue takes it too): two requests
        # finishing screening at once must admit once, and a suspension must
        # not interleave with a hand-out that read the old status. NO KEY so
        # inserts that reference the labeler (assignments) are not blocked.
        current = Labeler.objects.select_for_update(no_key=True).filter(pk=labeler.pk).first()
        if current is None or (expected is not None and current.status not in expected):
            if current is not None:
                _copy_status(current, into=labeler)
            return False
        changed = current.status != status
        if changed:
            Assignment.objects.filter(labeler=current, status=AssignmentStatus.IN_PROGRESS).update(
                status=AssignmentStatus.EXPIRED
            )
            LabelerStatusEvent.objects.create(
                labeler=current,
                from_status=current.status,
                to_status=status,
                reason=reason,
                changed_by=changed_by,
                created_at=now,
            )
            current.status = status
            current.status_changed_at = now
        current.status_reason = reason
        fields = ["status", "status_reason", "status_changed_at"]
        if exclude_labels is not None:
            current.exclude_labels = exclude_labels
            fields.append("exclude_labels")
        current.save(update_fields=fields)
        _copy_status(current, into=labeler)
        labeler.exclude_labels = current.exclude_labels
        return changed


def _copy_status(source: Labeler, *, into: Labeler) -> None:
    into.status = source.status
    into.status_reason = source.status_reason
    into.status_changed_at = source.status_changed_at
