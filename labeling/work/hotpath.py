"""The raw SQL of the hot paths (a rating click, a key press, a submit, a hand-out), in one module.

These run on every click, and building them through the ORM cost more Python
than PostgreSQL needed to run them. The rules stay in the services
(labeling.work.assignment, rating and queue); each function here sends its
statements and turns the rows into model instances. PRESS_PLAIN alone holds
rules itself, pinned to the services' by a property test. Why the statements
are kept together, and how to follow a key press through the services and
this module: docs/architecture.md, "The hot path's SQL in one module".

Each statement is named, takes its values as parameters (a fixed status or
kind of ours is written in where a partial index has to be matched:
IN_PROGRESS, QUALITY_CONTROL_UNSEEN), and says which rule it enforces and
which index it rides. Every statement runs on SQLite and PostgreSQL (the suite
runs on both); where SQLite lacks row locks its IMMEDIATE transactions
serialise writers. PRESS_PLAIN and FINISH_AND_CLOSE are PostgreSQL's alone
(data-modifying WITH clauses); elsewhere the services do the same statement
by statement.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.db import connection, models
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

from annotate.postgresql import fixed_literal, prepared_cursor, statement_sent
from labeling.labelers import labeler_from_row, labeler_select
from labeling.models import (
    Assignment,
    AssignmentStatus,
    GenerationStatus,
    Labeler,
    Phase,
    Problem,
    Solution,
    Task,
    TaskKind,
    TaskStatus,
)

# --- A rating click ------------------------------------------------------------

# Lock order is task, then assignment, everywhere (labeling.work.queue's
# hand-over too), so a write and a hand-over of the same task wait for each
# other instead of deadlocking. Primary keys.
TASK_LOCK = """
    SELECT t.id FROM labeling_task t JOIN labeling_assignment a ON a.task_id = t.id
    WHERE a.id = %s{owner} FOR UPDATE OF t
"""

# Everything a write reads about its assignment, in one statement that also
# checks the owner (the labeler's user id, when given) and locks the row:
# every write to one assignment is serialised by this lock. Primary keys (and
# the labeler's unique user id).
ASSIGNMENT_LOCK = """
    SELECT a.id, a.task_id, a.labeler_id, a.status, a.started_at, a.last_activity_at, a.lease_expires_at,
           a.total_time_ms, a.ratings_reset_version, a.version, t.solution_id AS t_solution_id,
           t.generation_id AS t_generation_id, t.kind AS t_kind, t.status AS t_status,
           t.labelers_needed AS t_labelers_needed, s.problem_id AS s_problem_id, s.steps AS s_steps{labeler}
    FROM labeling_assignment a
    JOIN labeling_task t ON t.id = a.task_id
    JOIN labeling_solution s ON s.id = t.solution_id{labeler_join}
    WHERE a.id = %s{owner}{lock}
"""
# With the labeler's row (every column, as labeling.labelers reads it) for a
# submit that loaded neither them nor their user: the owner's check found it
# already. Primary key.
LABELER_JOIN = " JOIN labeling_labeler l ON l.id = a.labeler_id"

OWNER = " AND a.labeler_id = (SELECT id FROM labeling_labeler WHERE user_id = %s)"
# The owner, as a session verified them (annotate.auth.SessionUser): still
# active and still with that password hash, which the per-request user load
# would otherwise check. auth_user's primary key.
OWNER_VERIFIED = """ AND a.labeler_id = (SELECT l.id FROM labeling_labeler l JOIN auth_user u ON u.id = l.user_id
    WHERE u.id = %s AND u.is_active AND u.password = %s)"""

# The stored ratings of an assignment in page order. labeled_step_unique_index
# (assignment, index), then step_rating_one_per_completion (step, completion).
RATINGS_OF_ASSIGNMENT = """
    SELECT r.step_id, s."index", s.chosen_completion, r.completion_index, r.rating, r.version, r.flagged, r.text
    FROM labeling_steprating r JOIN labeling_labeledstep s ON s.id = r.step_id
    WHERE s.assignment_id = %s ORDER BY s."index", r.completion_index
"""

# "Create or overwrite, but only with a newer version", in one statement: the
# rule holds in the statement itself, not only under the row lock. Conflict
# target step_rating_one_per_completion. The step is named by (assignment,
# index): a step added in the same pipelined batch has no id read back.
RATING_UPSERT = """
    INSERT INTO labeling_steprating (step_id, completion_index, text, rating, flagged, version, updated_at)
    VALUES ((SELECT id FROM labeling_labeledstep WHERE assignment_id = %s AND "index" = %s), %s, %s, %s, %s, %s, %s)
    ON CONFLICT (step_id, completion_index) DO UPDATE SET rating = EXCLUDED.rating, flagged = EXCLUDED.flagged,
        version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
    WHERE labeling_steprating.version < EXCLUDED.version
"""

# A step rated for the first time: its row, as the last labeled step
# (chosen_completion null until labeling moves past it). The assignment lock
# serialises writers, so no conflict handling: labeled_step_unique_index
# (assignment, index) would refuse a second row loudly.
LABELED_STEP_ADD = """
    INSERT INTO labeling_labeledstep (assignment_id, "index", chosen_completion, human_completion)
    VALUES (%s, %s, NULL, NULL)
"""

# The id of a step added in this transaction, for the rare write that needs
# it (the alternatives of a step just rated -1). labeled_step_unique_index.
LABELED_STEP_ID = """
    SELECT id FROM labeling_labeledstep WHERE assignment_id = %s AND "index" = %s
"""

# chosen_completion of some of an assignment's steps (0: the solution went on
# past it; null: labeling stops there). labeled_step_unique_index.
CHOSEN_COMPLETION_SET = """
    UPDATE labeling_labeledstep SET chosen_completion = %s WHERE assignment_id = %s AND "index" IN ({indexes})
"""

# Time on task, the renewed lease, the reset version and the state version
# after a click (or a batch of key presses), under the assignment lock.
# Primary key.
ASSIGNMENT_TOUCH = """
    UPDATE labeling_assignment SET total_time_ms = %s, last_activity_at = %s, lease_expires_at = %s,
        ratings_reset_version = %s, version = %s
    WHERE id = %s
"""


@dataclass(frozen=True)
class RatingRow:
    """One stored phase-2 rating with its step, as the rating service reads them."""

    step_id: int | None  # None: the step was added in this transaction and its id not read (labeled_step_id)
    index: int
    chosen: int | None
    completion: int
    rating: int | None
    version: int
    flagged: bool | None = None
    text: str = ""


_M = TypeVar("_M", bound=models.Model)


def _partial(model: type[_M], values: dict[str, Any]) -> _M:
    # A model instance from some of its columns (the others deferred), as the
    # ORM builds one from a query, so that save(update_fields=...) works on it.
    names = [f.attname for f in model._meta.concrete_fields if f.attname in values]
    return model.from_db(connection.alias, names, [values[n] for n in names])


def _aware(value: datetime | str | None) -> datetime | None:
    # SQLite hands back naive UTC datetimes (as text) to a raw query.
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value is not None and timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    return value


_COLUMNS: dict[str, list[str]] = {}


def _named(cursor: CursorWrapper, statement: str, row: tuple[Any, ...]) -> dict[str, Any]:
    # A row of one of the statements above by column name. Their columns are
    # fixed, so the names are read from the cursor once per statement
    # (``statement`` before its format()): building the description's
    # column objects on every click cost more than the zip.
    names = _COLUMNS.get(statement)
    if names is None:
        names = _COLUMNS[statement] = [c[0] for c in cursor.description]
    return dict(zip(names, row, strict=True))


def _cursor() -> CursorWrapper:
    # Every statement of this module but the candidate search is keyed by
    # primary or unique keys (OPEN_GENERATIONS runs with the same values every
    # time): one plan fits every run, so PostgreSQL prepares it once per
    # connection (annotate.postgresql) instead of parsing and planning it on
    # every click.
    return prepared_cursor(connection)


@contextmanager
def pipelined() -> Iterator[None]:
    """The statements of the block go to PostgreSQL without waiting for each one's answer (its pipeline mode).

    A fetch waits for the answers up to its own statement, the end of the
    block for the rest: a rating's four writes cost one round trip instead of
    four. The order of the statements and the transaction are unchanged; an
    error of a statement is raised (as Django's error) by the next fetch or
    at the end of the block, inside the caller's transaction, which then rolls
    back. The ORM stays correct inside (annotate.postgresql syncs before it
    reads a row count). On SQLite (nothing to wait for) a no-op.
    """
    if connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield


def assignment_locked(*, assignment_id: int, user_id: int | None, task_lock: bool) -> Assignment | None:
    """The assignment row, locked, with its task and the solution's steps; None if not found (or not the owner's).

    ``task_lock``: lock the task row first (TASK_LOCK). One query, two with the task lock.
    """
    return _assignment_locked(assignment_id=assignment_id, user_id=user_id, task_lock=task_lock, ratings=False)[0]


def assignment_locked_with_ratings(
    *, assignment_id: int, user_id: int | None, task_lock: bool, password_hash: str | None = None,
    with_labeler: bool = False,
) -> tuple[Assignment | None, list[RatingRow]]:  # fmt: skip
    """assignment_locked and then its rating_rows, both sent before either answer is read.

    Inside ``pipelined()`` the two (three with the task lock) cost one round
    trip. The ratings are read under the lock just taken; when the lock found
    nothing (not the owner's), they are read and thrown away.
    ``password_hash``: the owner also has to be active with this password
    hash (OWNER_VERIFIED), for a caller that did not load the user.
    ``with_labeler``: ``assignment.labeler`` is their whole row, read by the
    same statement (LABELER_JOIN).
    """
    return _assignment_locked(
        assignment_id=assignment_id, user_id=user_id, task_lock=task_lock, ratings=True, password_hash=password_hash,
        with_labeler=with_labeler,
    )  # fmt: skip


def _assignment_locked(
    *, assignment_id: int, user_id: int | None, task_lock: bool, ratings: bool, password_hash: str | None = None,
    with_labeler: bool = False,
) -> tuple[Assignment | None, list[RatingRow]]:  # fmt: skip
    params: list[Any] = [assignment_id]
    owner = ""
    if user_id is not None and password_hash is not None:
        owner = OWNER_VERIFIED
        params += [user_id, password_hash]
    elif user_id is not None:
        owner = OWNER
        params.append(user_id)
    lock = " FOR UPDATE OF a" if connection.features.has_select_for_update_of else ""
    with _cursor() as cursor, _cursor() as ratings_cursor:
        if task_lock and connection.features.has_select_for_update:
            cursor.execute(TASK_LOCK.format(owner=owner), params)
        labeler_columns = labeler_select(alias="l", prefix="l_") if with_labeler else ""
        cursor.execute(
            ASSIGNMENT_LOCK.format(owner=owner, lock=lock, labeler=labeler_columns and f", {labeler_columns}",
                                   labeler_join=LABELER_JOIN if with_labeler else ""),
            params,
        )  # fmt: skip
        if ratings:
            ratings_cursor.execute(RATINGS_OF_ASSIGNMENT, [assignment_id])
        row = cursor.fetchone()
        rows = _rating_rows(ratings_cursor.fetchall()) if ratings else []
        if row is None:
            return None, []
        labeler = labeler_from_row(row[-len(Labeler._meta.concrete_fields) :]) if with_labeler else None
        values = _named(cursor, ASSIGNMENT_LOCK + LABELER_JOIN if with_labeler else ASSIGNMENT_LOCK, row)
    assignment = _partial(Assignment, {k: v for k, v in values.items() if not k.startswith(("t_", "s_", "l_"))})
    if labeler is not None:
        assignment.labeler = labeler
    for name in ("started_at", "last_activity_at", "lease_expires_at"):
        setattr(assignment, name, _aware(getattr(assignment, name)))
    steps = values["s_steps"]
    solution = _partial(
        Solution,
        {
            "id": values["t_solution_id"],
            "problem_id": values["s_problem_id"],
            "steps": json.loads(steps) if isinstance(steps, str) else steps,
        },
    )
    task = _partial(
        Task,
        {
            "id": assignment.task_id,
            "generation_id": values["t_generation_id"],
            "solution_id": solution.pk,
            "kind": values["t_kind"],
            "labelers_needed": values["t_labelers_needed"],
            "status": values["t_status"],
        },
    )
    task.solution = solution
    assignment.task = task
    return assignment, rows


def rating_rows(assignment: Assignment) -> list[RatingRow]:
    with _cursor() as cursor:
        cursor.execute(RATINGS_OF_ASSIGNMENT, [assignment.pk])
        return _rating_rows(cursor.fetchall())


def _rating_rows(fetched: list[tuple[Any, ...]]) -> list[RatingRow]:
    return [
        RatingRow(step_id=s, index=i, chosen=ch, completion=c, rating=r, version=v,
                  flagged=None if f is None else bool(f), text=t)
        for s, i, ch, c, r, v, f, t in fetched
    ]  # fmt: skip


def rating_upsert(
    *, assignment_id: int, index: int, completion_index: int, text: str, rating: int | None, flagged: bool | None,
    version: int, now: datetime,
) -> None:  # fmt: skip
    with _cursor() as cursor:
        cursor.execute(
            RATING_UPSERT,
            [assignment_id, index, completion_index, text, rating, flagged, version,
             connection.ops.adapt_datetimefield_value(now)],
        )  # fmt: skip


def labeled_step_add(*, assignment_id: int, index: int) -> None:
    with _cursor() as cursor:
        cursor.execute(LABELED_STEP_ADD, [assignment_id, index])


def labeled_step_id(*, assignment_id: int, index: int, rows: list[RatingRow]) -> int:
    """The id of step ``index``: from ``rows`` (a step rated before), else read (a step added in this transaction)."""
    known = next(r.step_id for r in rows if r.index == index)
    if known is not None:
        return known
    with _cursor() as cursor:
        cursor.execute(LABELED_STEP_ID, [assignment_id, index])
        return int(cursor.fetchone()[0])


def chosen_completion_set(*, assignment_id: int, indexes: list[int], value: int | None) -> None:
    with _cursor() as cursor:
        cursor.execute(
            CHOSEN_COMPLETION_SET.format(indexes=", ".join(["%s"] * len(indexes))), [value, assignment_id, *indexes]
        )


def assignment_touch(assignment: Assignment) -> None:
    adapt = connection.ops.adapt_datetimefield_value
    with _cursor() as cursor:
        cursor.execute(
            ASSIGNMENT_TOUCH,
            [assignment.total_time_ms, adapt(assignment.last_activity_at), adapt(assignment.lease_expires_at),
             assignment.ratings_reset_version, assignment.version, assignment.pk],
        )  # fmt: skip


# --- A key press in one statement -------------------------------------------------

# A plain key press (a step rated 0 or +1, the next step rated -1 where no
# alternatives follow, a flag on a rated step, on a trajectory of 0 and +1
# ratings only) written whole in one statement in autocommit: one round trip
# instead of four, for most presses. It holds labeling.work.rating's rules
# (the owner as annotate.auth.SessionUser verified them, the version shown, a
# lease past LeaseNearExpiry's margin, a stored trajectory those rules would
# extend exactly so) and writes what _rate and _touch would; anything else
# matches nothing, writes nothing, and the caller falls back to presses_apply.
# tests/labeling/work/test_press_plain.py pins the two to the same result.
# The assignment's UPDATE is the gate: the trajectory is read on the
# statement's snapshot, perhaps before another writer commits, but every
# change moves the version on, so the UPDATE's recheck of the locked row then
# fails and nothing is written. Primary keys, the labeler's unique user id,
# labeled_step_unique_index, step_rating_one_per_completion and
# step_alternative_unique_ordinal. Sent on one line (compact, below).
PRESS_PLAIN = """
    WITH stored AS (
        SELECT count(*) AS n,
               count(*) FILTER (WHERE r.completion_index = 0 AND r.rating IN (0, 1)) AS plain,
               count(*) FILTER (WHERE ls.chosen_completion = 0) AS went_on,
               max(ls."index") AS last,
               max(ls."index") FILTER (WHERE ls.chosen_completion IS NULL) AS stopped,
               max(r.version) AS newest,
               max(ls.id) FILTER (WHERE ls."index" = %(step)s::int) AS step_id
        FROM labeling_labeledstep ls LEFT JOIN labeling_steprating r ON r.step_id = ls.id
        WHERE ls.assignment_id = %(assignment)s
    ), a AS (
        UPDATE labeling_assignment a SET
            total_time_ms = CASE WHEN {gap_ms} > 0 AND {gap_ms} <= %(idle_ms)s
                                 THEN COALESCE(a.total_time_ms, 0) + {gap_ms} ELSE a.total_time_ms END,
            last_activity_at = GREATEST(COALESCE(a.last_activity_at, a.started_at, %(now)s), %(now)s),
            lease_expires_at = %(lease_expires_at)s,
            ratings_reset_version = CASE WHEN %(rating)s::smallint = -1
                                         THEN GREATEST(a.ratings_reset_version, a.version + 1)
                                         ELSE a.ratings_reset_version END,
            version = a.version + 1
        FROM labeling_task t, labeling_solution s, stored
        WHERE a.id = %(assignment)s AND t.id = a.task_id AND s.id = t.solution_id
          AND a.labeler_id = (SELECT l.id FROM labeling_labeler l JOIN auth_user u ON u.id = l.user_id
                              WHERE u.id = %(user)s AND u.is_active AND u.password = %(password)s)
          AND a.status = %(in_progress)s AND a.version = %(version)s AND a.ratings_reset_version <= a.version
          AND a.lease_expires_at > %(lease_margin)s
          AND jsonb_typeof(s.steps) = 'array' AND %(step)s::int < jsonb_array_length(s.steps)
          AND stored.plain = stored.n AND COALESCE(stored.newest, 0) <= a.version
          AND (stored.n = 0 OR (stored.last = stored.n - 1 AND stored.went_on = stored.n - 1
                                AND stored.stopped = stored.last))
          AND CASE WHEN %(flag)s::boolean IS NOT NULL THEN %(step)s::int < stored.n
                   WHEN %(rating)s::smallint IN (0, 1) THEN %(step)s::int <= stored.n
                   WHEN %(rating)s::smallint = -1 THEN %(step)s::int = stored.n AND NOT EXISTS (
                       SELECT 1 FROM labeling_stepalternative alt
                       WHERE alt.solution_id = s.id AND alt.step_index = %(step)s::int)
                   ELSE false END
        RETURNING a.id, a.version, s.steps, jsonb_array_length(s.steps) AS step_count, stored.n, stored.step_id
    ), step_added AS (
        INSERT INTO labeling_labeledstep (assignment_id, "index", chosen_completion, human_completion)
        SELECT id, %(step)s::int, NULL, NULL FROM a WHERE step_id IS NULL
        RETURNING id
    ), went_on AS (
        UPDATE labeling_labeledstep ls SET chosen_completion = 0 FROM a
        WHERE a.step_id IS NULL AND ls.assignment_id = a.id AND ls."index" = a.n - 1
    ), rating_added AS (
        INSERT INTO labeling_steprating (step_id, completion_index, text, rating, flagged, version, updated_at)
        SELECT step_added.id, 0, a.steps ->> %(step)s::int, %(rating)s::smallint, NULL, a.version, %(now)s
        FROM a, step_added
    ), rating_changed AS (
        UPDATE labeling_steprating r SET rating = COALESCE(%(rating)s::smallint, r.rating),
            flagged = CASE WHEN COALESCE(%(flag)s::boolean, r.flagged) THEN true END,
            version = a.version, updated_at = %(now)s
        FROM a WHERE r.step_id = a.step_id AND r.completion_index = 0
    )
    SELECT a.version, a.n + (a.step_id IS NULL)::int AS labeled, a.step_count FROM a
""".format(gap_ms="floor(EXTRACT(EPOCH FROM %(now)s - COALESCE(a.last_activity_at, a.started_at, %(now)s)) * 1000)")


def compact(statement: str) -> str:
    """The statement on one line, every run of whitespace one space (none of ours has one inside a string).

    psycopg turns a statement's %(name)s placeholders into $1, $2 ... and
    keeps the result only for statements of at most 4,096 bytes
    (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH); a longer one is parsed
    again on every run. PRESS_PLAIN is longer with its indentation, and that
    parse was a sixth of a key press's app CPU.
    """
    return " ".join(statement.split())


PRESS_PLAIN = compact(PRESS_PLAIN)


@dataclass(frozen=True)
class PlainPress:
    """What PRESS_PLAIN stored: the state version after it, and how far labeling now goes."""

    version: int
    labeled: int  # steps 0..labeled-1 are rated: each 0 or +1, or the last -1 when the press was a -1
    step_count: int


def press_plain(
    *, assignment_id: int, user_id: int, password: str, step_index: int, rating: int | None, flag: bool | None,
    version: int, now: datetime, lease_margin_at: datetime, lease_expires_at: datetime, idle_ms: int,
) -> PlainPress | None:  # fmt: skip
    """PRESS_PLAIN, on PostgreSQL; None when it wrote nothing (or on another database, where it does not run)."""
    if connection.vendor != "postgresql":
        return None
    params: dict[str, Any] = {"assignment": assignment_id, "user": user_id, "password": password, "step": step_index,
              "rating": rating, "flag": flag, "version": version, "now": now, "lease_margin": lease_margin_at,
              "lease_expires_at": lease_expires_at, "idle_ms": idle_ms,
              "in_progress": AssignmentStatus.IN_PROGRESS}  # fmt: skip
    with _cursor() as cursor:
        cursor.execute(PRESS_PLAIN, params)
        row = cursor.fetchone()
    return None if row is None else PlainPress(version=int(row[0]), labeled=int(row[1]), step_count=int(row[2]))


# --- A hand-out ------------------------------------------------------------------

# The open generations whose normal work is handed out (phase 1 and 2), in
# the order the queue tries them (NULLs, phase 1's number, sort as the
# ORM's order_by would). A scan of a table of a few rows; it runs on every
# hand-out.
OPEN_GENERATIONS = """
    SELECT id FROM labeling_generation WHERE status = %s AND phase IN (%s, %s) ORDER BY number
"""


def open_generation_ids() -> list[int]:
    return open_generation_ids_sent()()


def open_generation_ids_sent() -> Callable[[], list[int]]:
    """OPEN_GENERATIONS sent now; the returned function reads its answer (once), as in labeler_lock_sent."""
    return statement_sent(connection, OPEN_GENERATIONS, [GenerationStatus.OPEN, Phase.ONE, Phase.TWO],
                 lambda cursor: [int(row[0]) for row in cursor.fetchall()])  # fmt: skip


# The QC items a labeler may still be handed (labeling.work.queue draws one at
# QC_RATE): gold-labeled QC tasks of open phase-2 generations, not retired (a
# QC task done after its first submission still goes to everyone), minus what
# this labeler already had: each QC item at most once per person.
# task_gold_kind_idx (partial: kind other than normal) finds the pool; the two
# EXISTS ride goldstep's solution index and assignment_one_per_task_and_labeler.
# The fixed conditions are written in, as for IN_PROGRESS below: passed as
# values, the generic plan cannot match the partial index and starts from
# every gold step there is.
QUALITY_CONTROL_UNSEEN = f"""
    SELECT t.id FROM labeling_task t JOIN labeling_generation g ON g.id = t.generation_id
    WHERE t.kind = {fixed_literal(TaskKind.QUALITY_CONTROL)} AND t.status <> {fixed_literal(TaskStatus.RETIRED)}
      AND g.status = {fixed_literal(GenerationStatus.OPEN)} AND g.phase = {int(Phase.TWO)}
      AND EXISTS (SELECT 1 FROM labeling_goldstep s WHERE s.solution_id = t.solution_id)
      AND NOT EXISTS (SELECT 1 FROM labeling_assignment a WHERE a.task_id = t.id AND a.labeler_id = %s)
    ORDER BY t.id
"""


def quality_control_unseen_ids(*, labeler_id: int) -> list[int]:
    with _cursor() as cursor:
        cursor.execute(QUALITY_CONTROL_UNSEEN, [labeler_id])
        return [int(row[0]) for row in cursor.fetchall()]


# The best open normal task of a generation that has a free place and that the
# labeler has not had. Served by task_queue_idx (generation, status, -priority,
# id): an ordered index scan that stops at the first row passing the filters.
# Live places count submitted work and unexpired leases (labelers_needed).
#
# The front of the queue is the tasks being labeled right now, one per
# labeler at work, and every search steps over them. Counting each one's
# places probes its assignments (about four buffers), so a hand-out cost
# grew with the number of labelers at work (1.2k buffers at 240 labelers, 5k
# at 1,000). The live leases are first read once into a hashed set, from
# assignment_one_in_progress_per_labeler (partial: in progress, so as many
# entries as labelers at work, and matched only by the status written in),
# and a one-place task in it is passed over without a probe. That test
# decides nothing the count would not: a one-place task with a live lease has
# no free place. The count still decides every other row.
TASK_CANDIDATE = f"""
    SELECT t.id, t.priority, t.labelers_needed FROM labeling_task t
    WHERE t.generation_id = %s AND t.status = %s AND t.kind = %s{{tried}}
      AND (t.labelers_needed > 1 OR t.id NOT IN (
           SELECT b.task_id FROM labeling_assignment b
           WHERE b.status = {fixed_literal(AssignmentStatus.IN_PROGRESS)} AND b.lease_expires_at > %s))
      AND (SELECT COUNT(*) FROM labeling_assignment a WHERE a.task_id = t.id
           AND (a.status = %s OR (a.status = %s AND a.lease_expires_at > %s))) < t.labelers_needed
      AND NOT EXISTS (SELECT 1 FROM labeling_assignment m WHERE m.task_id = t.id AND m.labeler_id = %s)
    ORDER BY t.priority DESC, t.id
    LIMIT 1{{lock}}
"""


def task_candidate_params(*, generation_id: int, labeler_id: int, at: Any, tried: Sequence[int] = ()) -> list[Any]:
    """TASK_CANDIDATE's values in order; ``at``: the moment, adapted for the database (leases live after it)."""
    return [generation_id, TaskStatus.OPEN, TaskKind.NORMAL, *tried, at, AssignmentStatus.SUBMITTED,
            AssignmentStatus.IN_PROGRESS, at, labeler_id]  # fmt: skip


def task_candidate(
    *, generation_id: int, labeler_id: int, now: datetime, tried: list[int], skip_locked: bool
) -> tuple[int, float, int] | None:
    """(task id, priority, labelers_needed) of the best candidate, its row locked; ``tried`` ids left out."""
    lock = ""
    if connection.features.has_select_for_update:
        lock = " FOR UPDATE OF t SKIP LOCKED" if skip_locked else " FOR UPDATE OF t"
    excluded = f" AND t.id NOT IN ({', '.join(['%s'] * len(tried))})" if tried else ""
    at = connection.ops.adapt_datetimefield_value(now)
    # Not prepared (_cursor): planned on every run, for the generation and
    # the moment at hand; a generic plan of this search measured slower.
    with connection.cursor() as cursor:
        cursor.execute(
            TASK_CANDIDATE.format(tried=excluded, lock=lock),
            task_candidate_params(generation_id=generation_id, labeler_id=labeler_id, at=at, tried=tried),
        )
        row = cursor.fetchone()
    return (int(row[0]), float(row[1]), int(row[2])) if row else None


# The candidate again, after its lock: places are re-counted by a new
# statement, which under READ COMMITTED sees every hand-out committed since
# the candidate's snapshot (anyone leasing it from now on needs our lock).
# It also loads what the task screen shows of the task, its solution and its
# problem. Primary keys; the counts ride assignment_one_per_task_and_labeler
# (task, labeler).
TASK_STILL_FREE = """
    SELECT t.id, t.generation_id, t.solution_id, t.kind, t.status, t.labelers_needed,
           s.steps AS s_steps, s.problem_id AS s_problem_id, p.problem AS p_problem, p.answer AS p_answer,
           (SELECT COUNT(*) FROM labeling_assignment a WHERE a.task_id = t.id
              AND (a.status = %(submitted)s OR (a.status = %(in_progress)s AND a.lease_expires_at > %(now)s))) AS live,
           (SELECT COUNT(*) FROM labeling_assignment a WHERE a.task_id = t.id AND a.labeler_id = %(labeler)s) AS mine,
           (SELECT COUNT(*) FROM labeling_assignment a WHERE a.task_id = t.id
              AND a.status = %(in_progress)s AND a.lease_expires_at <= %(now)s) AS lapsed
    FROM labeling_task t
    JOIN labeling_solution s ON s.id = t.solution_id
    JOIN labeling_problem p ON p.id = s.problem_id
    WHERE t.id = %(task)s
"""


@dataclass(frozen=True)
class Places:
    """A locked candidate with its solution and problem loaded, and who holds its places now."""

    task: Task
    live: int  # submitted assignments and unexpired leases
    mine: int  # the labeler's own assignments on it (any status)
    lapsed: int  # in-progress assignments whose lease ran out


def task_places(*, task_id: int, labeler_id: int, now: datetime) -> Places:
    at = connection.ops.adapt_datetimefield_value(now)
    params = {"submitted": AssignmentStatus.SUBMITTED, "in_progress": AssignmentStatus.IN_PROGRESS, "now": at,
              "labeler": labeler_id, "task": task_id}  # fmt: skip
    with _cursor() as cursor:
        cursor.execute(TASK_STILL_FREE, params)
        values = _named(cursor, TASK_STILL_FREE, cursor.fetchone())
    steps = values["s_steps"]
    problem = _partial(Problem, {"id": values["s_problem_id"], "problem": values["p_problem"],
                                 "answer": values["p_answer"]})  # fmt: skip
    solution = _partial(Solution, {"id": values["solution_id"], "problem_id": problem.pk,
                                   "steps": json.loads(steps) if isinstance(steps, str) else steps})  # fmt: skip
    solution.problem = problem
    task = _partial(Task, {k: values[k] for k in ("id", "generation_id", "solution_id", "kind", "status",
                                                   "labelers_needed")})  # fmt: skip
    task.solution = solution
    return Places(task=task, live=int(values["live"]), mine=int(values["mine"]), lapsed=int(values["lapsed"]))


# The in-progress status written into a statement rather than passed: the
# planner matches a partial index (here assignment_one_in_progress_per_labeler)
# only to a condition it can read, also in the generic plan of a prepared
# statement; with a parameter, that plan reads every assignment the labeler
# ever had. A constant of ours, not a value from a request.
IN_PROGRESS = fixed_literal(AssignmentStatus.IN_PROGRESS)

# The labeler's own row, locked, with their in-progress assignment if they
# have one (assignment_one_in_progress_per_labeler: at most one) and its task:
# what a hand-out reads first, in one statement. The row's status and the QC
# window they last passed (labeling.quality.control) are read under the
# lock. NO KEY: inserting their new assignment (a foreign key to this row)
# must not wait on it. Primary key, then assignment_one_in_progress_per_labeler
# (partial: in progress), one probe however many assignments the labeler had.
LABELER_LOCK = f"""
    SELECT l.status, l.status_reason, l.status_changed_at, l.qc_window_passed,
           a.id AS a_id, a.task_id AS a_task_id, a.status AS a_status, a.started_at AS a_started_at,
           a.last_activity_at AS a_last_activity_at, a.lease_expires_at AS a_lease_expires_at,
           a.total_time_ms AS a_total_time_ms, a.finish_reason_text AS a_finish_reason_text,
           a.ratings_reset_version AS a_ratings_reset_version,
           t.generation_id AS t_generation_id, t.solution_id AS t_solution_id, t.kind AS t_kind,
           t.status AS t_status, t.labelers_needed AS t_labelers_needed
    FROM labeling_labeler l
    LEFT JOIN labeling_assignment a ON a.labeler_id = l.id AND a.status = {IN_PROGRESS}
    LEFT JOIN labeling_task t ON t.id = a.task_id
    WHERE l.id = %s{{lock}}
"""


LabelerLocked = tuple[tuple[str, str, datetime | None, str], Assignment | None]


def labeler_lock_sent(*, labeler_id: int) -> Callable[[], LabelerLocked | None]:
    """LABELER_LOCK sent now; the returned function reads its answer, once.

    The answer: (status, status_reason, status_changed_at, qc_window_passed)
    and the in-progress assignment with its task; None when there is no such labeler.

    Inside pipelined(), statements sent before the answer is read travel with
    the lock and run after it, on snapshots taken once it is held: the
    hand-out's reads that need nothing from its answer cost no round trip of
    their own.
    """
    lock = " FOR NO KEY UPDATE OF l" if connection.features.has_select_for_update_of else ""
    return statement_sent(connection, LABELER_LOCK.format(lock=lock), [labeler_id],
                 lambda cursor: _labeler_row(cursor, labeler_id))  # fmt: skip


def _labeler_row(cursor: CursorWrapper, labeler_id: int) -> LabelerLocked | None:
    row = cursor.fetchone()
    if row is None:
        return None
    values = _named(cursor, LABELER_LOCK, row)
    status = (values["status"], values["status_reason"], _aware(values["status_changed_at"]),
              values["qc_window_passed"])  # fmt: skip
    if values["a_id"] is None:
        return status, None
    assignment = _partial(
        Assignment,
        {"id": values["a_id"], "labeler_id": labeler_id, "ratings_reset_version": values["a_ratings_reset_version"],
         **{k[2:]: values[k] for k in ("a_task_id", "a_status", "a_total_time_ms", "a_finish_reason_text")},
         **{k[2:]: _aware(values[k]) for k in ("a_started_at", "a_last_activity_at", "a_lease_expires_at")}},
    )  # fmt: skip
    assignment.task = _partial(
        Task,
        {"id": assignment.task_id,
         **{k[2:]: values[k] for k in ("t_generation_id", "t_solution_id", "t_kind", "t_status", "t_labelers_needed")}},
    )  # fmt: skip
    return status, assignment


# A new lease: the labeler's in-progress assignment of the task, with no
# time and no ratings yet. assignment_one_per_task_and_labeler and
# assignment_one_in_progress_per_labeler refuse a second one (IntegrityError,
# which the hand-out retries).
ASSIGNMENT_LEASE = """
    INSERT INTO labeling_assignment (task_id, labeler_id, status, started_at, last_activity_at, lease_expires_at,
        submitted_at, total_time_ms, finish_reason, finish_reason_text, label_steps_json, ratings_reset_version,
        version, task_kind)
    VALUES (%s, %s, %s, %s, %s, %s, NULL, 0, NULL, '', NULL, 0, 0, %s) RETURNING id
"""


def assignment_lease(*, task: Task, labeler: Labeler, now: datetime, lease_expires_at: datetime) -> Assignment:
    """The new assignment, as Assignment.objects.create would return it (``started_at`` is ``now`` itself)."""
    adapt = connection.ops.adapt_datetimefield_value
    with _cursor() as cursor:
        cursor.execute(
            ASSIGNMENT_LEASE,
            [task.pk, labeler.pk, AssignmentStatus.IN_PROGRESS, adapt(now), adapt(now), adapt(lease_expires_at),
             task.kind],
        )  # fmt: skip
        pk = int(cursor.fetchone()[0])
    assignment = Assignment(
        id=pk, task=task, labeler=labeler, status=AssignmentStatus.IN_PROGRESS, started_at=now,
        last_activity_at=now, lease_expires_at=lease_expires_at, total_time_ms=0, task_kind=task.kind,
    )  # fmt: skip
    assignment._state.adding = False
    assignment._state.db = connection.alias
    return assignment


# --- A submit ------------------------------------------------------------------

# The finish: time on task, the status and reason, the frozen label and the
# state version, under the caller's locks. Primary key.
ASSIGNMENT_FINISH = """
    UPDATE labeling_assignment SET total_time_ms = %s, last_activity_at = %s, status = %s, submitted_at = %s,
        finish_reason = %s, finish_reason_text = %s, label_steps_json = %s, version = %s
    WHERE id = %s
"""

# A submit closes its task once it has all its labelers. Under the task row
# lock (taken by the submit), so two labelers finishing one multi-labeler
# task count each other's submissions. Primary key; the count rides
# assignment_one_per_task_and_labeler. _TASK_CLOSE is the statement with the
# task and the counting left open for its two uses below.
_TASK_CLOSE = """
    UPDATE labeling_task SET status = %s
    WHERE id = {task} AND status = %s
      AND labelers_needed <= {this}(SELECT COUNT(*) FROM labeling_assignment a
                              WHERE a.task_id = labeling_task.id AND a.status = %s{other})
"""
TASK_CLOSE_WHEN_COMPLETE = _TASK_CLOSE.format(task="%s", this="", other="")

# Both in one statement (PostgreSQL: a data-modifying WITH clause, which
# SQLite lacks; there they run one after the other). The close reads the task
# id from the finish, so a finish that matched nothing closes nothing. The
# finished assignment is counted by hand ("1 +"), the others as stored: the
# count would not see the same statement's own update.
FINISH_AND_CLOSE = compact(
    f"""
    WITH finished AS ({ASSIGNMENT_FINISH} RETURNING task_id)
    {_TASK_CLOSE.format(task="(SELECT task_id FROM finished)", this="1 + ", other=" AND a.id <> %s")}
"""
)


def assignment_finish_write(assignment: Assignment) -> None:
    """ASSIGNMENT_FINISH, then TASK_CLOSE_WHEN_COMPLETE for its task: one statement on PostgreSQL, two elsewhere.

    The assignment was in progress (the caller checked it under its lock), so
    it is not among the stored submissions the close counts.
    """
    adapt = connection.ops.adapt_datetimefield_value
    finish = [assignment.total_time_ms, adapt(assignment.last_activity_at), assignment.status,
              adapt(assignment.submitted_at), assignment.finish_reason, assignment.finish_reason_text,
              assignment.label_steps_json, assignment.version, assignment.pk]  # fmt: skip
    with _cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                FINISH_AND_CLOSE,
                [*finish, TaskStatus.DONE, TaskStatus.OPEN, AssignmentStatus.SUBMITTED, assignment.pk],
            )
            return
        cursor.execute(ASSIGNMENT_FINISH, finish)
        cursor.execute(
            TASK_CLOSE_WHEN_COMPLETE,
            [TaskStatus.DONE, assignment.task_id, TaskStatus.OPEN, AssignmentStatus.SUBMITTED],
        )
