"""Quality control: agreement with gold, screening admission, rolling quality, IAA.

Services (writes) and selectors (reads returning numbers) for the admin,
the API and the labeler's own screening page. The arithmetic lives in
``labeling.quality.agreement``; definitions are in docs/quality.md.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import combinations
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Exists, OuterRef, QuerySet

from annotate.postgresql import fixed_literal, prepared_cursor, statement_sent
from labeling.labelers import labeler_set_status
from labeling.models import (
    SCREENING_GENERATION,
    Assignment,
    AssignmentStatus,
    Generation,
    GoldStep,
    Labeler,
    LabelerStatus,
    StepRating,
    Task,
    TaskKind,
    TaskStatus,
)
from labeling.quality.agreement import Gold, first_negative, ordinal_alpha, share, solution_agrees, steps_agreeing

GOLD_KINDS = (TaskKind.SCREENING, TaskKind.QUALITY_CONTROL)


# --- Loading gold and ratings -------------------------------------------------


def gold_for(*, solution_ids: Iterable[int]) -> dict[int, Gold]:
    """Gold per solution id, for the solutions that are gold (one query)."""
    return _gold_of(
        GoldStep.objects.filter(solution_id__in=set(solution_ids)).values_list(
            "solution_id", "step_index", "negative_ok", "neutral_ok", "positive_ok"
        )
    )


def _gold_of(rows: Iterable[tuple[int, int, Any, Any, Any]]) -> dict[int, Gold]:
    # Gold per solution from (solution, step, negative_ok, neutral_ok,
    # positive_ok) rows; SQLite hands a raw query its booleans as 0 and 1.
    acceptable: dict[int, dict[int, frozenset[int]]] = defaultdict(dict)
    for solution_id, index, neg, neu, pos in rows:
        acceptable[solution_id][index] = frozenset(r for r, ok in ((-1, neg), (0, neu), (1, pos)) if ok)
    return {sid: Gold(acceptable=steps, step_count=len(steps)) for sid, steps in acceptable.items()}


def own_ratings_for(*, assignment_ids: Iterable[int]) -> dict[int, dict[int, int | None]]:
    """Per assignment: step index -> rating of the solution's own step (completion 0) (one query)."""
    return _ratings_of(
        StepRating.objects.filter(step__assignment_id__in=set(assignment_ids), completion_index=0).values_list(
            "step__assignment_id", "step__index", "rating"
        )
    )


def _ratings_of(rows: Iterable[tuple[int, int, int | None]]) -> dict[int, dict[int, int | None]]:
    # Per assignment, step index -> rating, from (assignment, step, rating) rows.
    ratings: dict[int, dict[int, int | None]] = defaultdict(dict)
    for assignment_id, index, rating in rows:
        ratings[assignment_id][index] = rating
    return ratings


@dataclass(frozen=True)
class GoldOutcome:
    assignment_id: int
    labeler_id: int
    task_id: int
    submitted_at: datetime | None
    agrees: bool
    steps_agreed: int
    steps_rated: int


def gold_outcomes(assignments: QuerySet[Assignment]) -> list[GoldOutcome]:
    """Agreement of each assignment with its solution's gold; assignments on non-gold solutions are left out.

    An assignment that never got submitted (expired) counts as disagreeing.
    Three queries whatever the number of assignments.
    """
    rows = list(
        assignments.values_list(
            "pk", "labeler_id", "task_id", "task__solution_id", "status", "finish_reason", "submitted_at"
        )
    )
    gold = gold_for(solution_ids=(r[3] for r in rows))
    rows = [r for r in rows if r[3] in gold]
    ratings = own_ratings_for(assignment_ids=(r[0] for r in rows))
    outcomes = []
    for pk, labeler_id, task_id, solution_id, status, finish_reason, submitted_at in rows:
        agrees, agreed, rated = _judged(gold[solution_id], ratings.get(pk, {}), status, finish_reason)
        outcomes.append(
            GoldOutcome(
                assignment_id=pk,
                labeler_id=labeler_id,
                task_id=task_id,
                submitted_at=submitted_at,
                agrees=agrees,
                steps_agreed=agreed,
                steps_rated=rated,
            )
        )
    return outcomes


def _judged(
    gold: Gold, ratings: dict[int, int | None], status: str, finish_reason: str | None
) -> tuple[bool, int, int]:
    # (agrees, steps agreeing, steps rated) of one finished gold item; one
    # that expired unsubmitted disagrees.
    agreed, rated = steps_agreeing(gold=gold, ratings=ratings)
    submitted = status == AssignmentStatus.SUBMITTED
    return submitted and solution_agrees(gold=gold, ratings=ratings, finish_reason=finish_reason), agreed, rated


@dataclass(frozen=True)
class AgreementSummary:
    items: int
    agreed: int
    steps_rated: int
    steps_agreed: int

    @property
    def rate(self) -> float | None:
        """Per-solution agreement (the primary figure); None without items."""
        return share(self.agreed, self.items)

    @property
    def step_rate(self) -> float | None:
        """Per-step agreement (secondary)."""
        return share(self.steps_agreed, self.steps_rated)


def summarise(outcomes: Sequence[GoldOutcome]) -> AgreementSummary:
    return AgreementSummary(
        items=len(outcomes),
        agreed=sum(o.agrees for o in outcomes),
        steps_rated=sum(o.steps_rated for o in outcomes),
        steps_agreed=sum(o.steps_agreed for o in outcomes),
    )


# In progress is not judged yet; expired ones were served and not done.
_FINISHED = (AssignmentStatus.SUBMITTED, AssignmentStatus.EXPIRED)


def _finished_gold_assignments() -> QuerySet[Assignment]:
    return Assignment.objects.filter(task__kind__in=GOLD_KINDS, status__in=_FINISHED)


# --- Selectors: agreement with gold -------------------------------------------


def labeler_gold_agreement(
    *, labeler: Labeler, kind: TaskKind | None = None, generation: Generation | None = None
) -> AgreementSummary:
    """A labeler's agreement with gold over their finished screening and/or QC items."""
    qs = _finished_gold_assignments().filter(labeler=labeler)
    if kind is not None:
        qs = qs.filter(task__kind=kind)
    if generation is not None:
        qs = qs.filter(task__generation=generation)
    return summarise(gold_outcomes(qs))


def generation_gold_agreement(*, generation: Generation) -> AgreementSummary:
    """Agreement with gold of everyone's finished gold items in one generation (-1: screening)."""
    return summarise(gold_outcomes(_finished_gold_assignments().filter(task__generation=generation)))


def generation_gold_agreement_by_labeler(*, generation: Generation) -> dict[int, AgreementSummary]:
    """Per labeler id, agreement with gold on one generation's gold items."""
    by_labeler: dict[int, list[GoldOutcome]] = defaultdict(list)
    for outcome in gold_outcomes(_finished_gold_assignments().filter(task__generation=generation)):
        by_labeler[outcome.labeler_id].append(outcome)
    return {labeler_id: summarise(items) for labeler_id, items in by_labeler.items()}


# --- Screening ---------------------------------------------------------------


def screening_set_ids() -> list[int]:
    """Task ids of the screening set, in the order it is served.

    The first SCREENING_SET_SIZE screening tasks (not retired) of generation -1 whose
    solution is gold, by priority then id (task_gold_kind_idx).
    """
    return list(
        # Not RETIRED rather than OPEN: the rating service marks a task DONE
        # once labelers_needed people submitted it, but gold items are served
        # to everyone.
        Task.objects.filter(kind=TaskKind.SCREENING, generation__number=SCREENING_GENERATION)
        .exclude(status=TaskStatus.RETIRED)
        .filter(Exists(GoldStep.objects.filter(solution_id=OuterRef("solution_id"))))
        .order_by("-priority", "pk")
        .values_list("pk", flat=True)[: settings.SCREENING_SET_SIZE]
    )


@dataclass(frozen=True)
class ScreeningResult:
    set_size: int
    done: int
    agreement: AgreementSummary
    threshold: float
    status: str

    @property
    def threshold_percent(self) -> int:
        return round(self.threshold * 100)

    @property
    def finished(self) -> bool:
        return self.set_size > 0 and self.done >= self.set_size

    @property
    def passed(self) -> bool:
        rate = self.agreement.rate
        return self.finished and rate is not None and rate >= self.threshold


def labeler_screening_result(*, labeler: Labeler) -> ScreeningResult:
    """Where a labeler stands in screening: progress and, once finished, agreement (no per-item detail)."""
    set_ids = screening_set_ids()
    had = Assignment.objects.filter(labeler=labeler, task_id__in=set_ids)
    done = had.exclude(status=AssignmentStatus.IN_PROGRESS).count()
    agreement = summarise(gold_outcomes(had.exclude(status=AssignmentStatus.IN_PROGRESS)))
    return ScreeningResult(
        set_size=len(set_ids),
        done=done,
        agreement=agreement,
        threshold=settings.SCREENING_PASS_THRESHOLD,
        status=labeler.status,
    )


@dataclass(frozen=True)
class ScreeningPlace:
    """A screening task's place in the set, as the task screen says it: "Screening task ``number`` of ``size``"."""

    number: int
    size: int


def screening_place(*, assignment: Assignment) -> ScreeningPlace | None:
    """Where a screening task stands in the set (served in the set's order, so its position); None for other tasks.

    Reads the task's kind from ``assignment.task`` (loaded with the task
    screen), so a task that is not a screening item costs no query.
    """
    if assignment.task.kind != TaskKind.SCREENING:
        return None
    set_ids = screening_set_ids()
    if assignment.task_id not in set_ids:
        return None  # retired from the set since it was handed out
    return ScreeningPlace(number=set_ids.index(assignment.task_id) + 1, size=len(set_ids))


def screening_outcome_note(*, labeler: Labeler) -> str:
    """What the labeler is told at the moment their screening is decided (labeler_screening_conclude)."""
    result = labeler_screening_result(labeler=labeler)
    matched = f"{result.agreement.agreed} of {result.agreement.items} of your labels matched the reviewers'"
    if labeler.status == LabelerStatus.ACTIVE:
        return f"You passed the screening: {matched}. Regular work starts now; here is your first task."
    return (
        f"That was the last screening task. You did not pass the screening: {matched}, "
        f"where {result.threshold_percent}% was needed."
    )


def labeler_screening_conclude(*, labeler: Labeler, now: datetime | None = None) -> bool:
    """Admit or fail a labeler who has finished the screening set; True if their status changed.

    Does nothing unless the labeler is in screening and has had every item of
    the set (and holds none in progress). ``labeler_set_status`` locks the
    labeler row and changes only from SCREENING, so two requests finishing
    at the same moment decide once.
    """
    if labeler.status != LabelerStatus.SCREENING:
        return False
    result = labeler_screening_result(labeler=labeler)
    if not result.finished:
        return False
    rate = result.agreement.rate or 0.0
    summary = (
        f"{result.agreement.agreed} of {result.agreement.items} screening solutions matched the reviewers' "
        f"answers ({rate:.0%}; {result.threshold:.0%} needed)"
    )
    if result.passed:
        return labeler_set_status(
            labeler=labeler,
            status=LabelerStatus.ACTIVE,
            reason=f"Passed screening: {summary}.",
            expected={LabelerStatus.SCREENING},
            now=now,
        )
    return labeler_set_status(
        labeler=labeler,
        status=LabelerStatus.FAILED_SCREENING,
        reason=f"Did not pass screening: {summary}.",
        expected={LabelerStatus.SCREENING},
        now=now,
    )


# --- Rolling quality ---------------------------------------------------------


def labeler_rolling_quality(*, labeler: Labeler) -> AgreementSummary:
    """Agreement on the labeler's last QC_WINDOW finished QC items since they were last admitted or reinstated.

    Counting only since the last status change means a reinstated labeler
    starts with a clean window instead of being suspended again at once.
    """
    return window_quality(_rolling_window_ids(labeler=labeler))


# The rolling window: the labeler's last finished QC items (newest first)
# since their status last changed. Written out rather than built by the ORM
# because every hand-out reads it (labeler_quality_enforce), and building
# the query cost ten times what running it does.
# Served by assignment_qc_window_idx (labeler, -started_at, -id; partial:
# finished QC items), an index scan that stops after QC_WINDOW rows. Its
# conditions are written into the statement, not passed, so that the planner
# matches that partial index also in the prepared statement's generic plan;
# passed as values (or joined to the task for its kind), that plan reads every
# assignment the labeler ever had. Constants of ours, not request values.
ROLLING_WINDOW_IDS = f"""
    SELECT a.id FROM labeling_assignment a
    WHERE a.labeler_id = %s AND a.task_kind = {fixed_literal(TaskKind.QUALITY_CONTROL)}
      AND a.status IN ({fixed_literal(*_FINISHED)}){{since}}
    ORDER BY a.started_at DESC, a.id DESC
    LIMIT %s
"""


def _rolling_window_ids(*, labeler: Labeler) -> list[int]:
    return rolling_window_sent(labeler=labeler)()


def rolling_window_sent(*, labeler: Labeler) -> Callable[[], list[int]]:
    """The rolling window's statement for the labeler's status as this object holds it, sent; call to read it.

    Sent inside labeling.work.hotpath.pipelined(), it travels to PostgreSQL
    with the statements around it (annotate.postgresql.statement_sent).
    """
    params: list[Any] = [labeler.pk]
    since = ""
    if labeler.status_changed_at is not None:
        since = " AND a.started_at > %s"
        params.append(connection.ops.adapt_datetimefield_value(labeler.status_changed_at))
    params.append(settings.QC_WINDOW)
    # Prepared on PostgreSQL (annotate.postgresql): every hand-out runs it,
    # and its plan is the same index scan whoever the labeler is.
    return statement_sent(connection, ROLLING_WINDOW_IDS.format(since=since), params,
                          lambda cursor: [int(row[0]) for row in cursor.fetchall()])  # fmt: skip


def labeler_quality_enforce(
    *, labeler: Labeler, now: datetime | None = None, window_ids: list[int] | None = None
) -> bool:
    """Suspend an active labeler whose rolling QC agreement fell below QC_SUSPEND_BELOW; True if suspended.

    ``window_ids``: the rolling window, read already for the labeler's
    current status (rolling_window_sent); read here when None. Every hand-out
    asks, with the labeler's row locked and ``qc_window_passed`` read under
    that lock (labeling.work.queue). A window judged and passed before is
    not scored again: once a labeler has QC_MIN_ITEMS checked items, scoring
    took about 2 ms of CPU on each of their hand-outs, and the window
    changes only when a QC item of theirs is finished.
    """
    if labeler.status != LabelerStatus.ACTIVE:
        return False
    window = _rolling_window_ids(labeler=labeler) if window_ids is None else window_ids
    if len(window) < settings.QC_MIN_ITEMS:
        # Too few checked items to judge (every new labeler for their first
        # hundred tasks or so): no need to score them.
        return False
    digest = _window_digest(labeler=labeler, window=window)
    if digest == labeler.qc_window_passed:
        return False
    quality = window_quality(window)
    rate = quality.rate
    if quality.items < settings.QC_MIN_ITEMS or rate is None or rate >= settings.QC_SUSPEND_BELOW:
        Labeler.objects.filter(pk=labeler.pk).update(qc_window_passed=digest)
        labeler.qc_window_passed = digest
        return False
    return labeler_set_status(
        labeler=labeler,
        status=LabelerStatus.SUSPENDED,
        reason=(
            f"Suspended automatically: {quality.agreed} of the last {quality.items} checked solutions matched the "
            f"reviewers' answers ({rate:.0%}; {settings.QC_SUSPEND_BELOW:.0%} needed). An admin can reinstate you."
        ),
        expected={LabelerStatus.ACTIVE},
        now=now,
    )


# A window's items, their solutions' gold steps and their own ratings: what
# window_quality judges, in three statements written out rather than
# gold_outcomes's three ORM queries, whose building cost several times their
# running: a labeler's window is scored on about one hand-out in ten. The
# gold is read by solution, with the window's solutions as a subquery: joined
# to the tasks directly, the planner merges the gold steps with every task by
# solution (an index scan of the whole task table, 50 ms). An item whose
# solution has no gold is left out, as gold_outcomes leaves it out. Primary
# keys; gold_step_unique (solution, step); then labeled_step_unique_index
# (assignment, index) and step_rating_one_per_completion (step, completion).
WINDOW_ITEMS = """
    SELECT a.id, a.status, a.finish_reason, t.solution_id
    FROM labeling_assignment a JOIN labeling_task t ON t.id = a.task_id
    WHERE a.id IN ({ids})
"""
WINDOW_GOLD = """
    SELECT g.solution_id, g.step_index, g.negative_ok, g.neutral_ok, g.positive_ok
    FROM labeling_goldstep g
    WHERE g.solution_id IN (SELECT t.solution_id FROM labeling_assignment a JOIN labeling_task t ON t.id = a.task_id
                            WHERE a.id IN ({ids}))
"""
WINDOW_RATINGS = """
    SELECT s.assignment_id, s."index", r.rating
    FROM labeling_labeledstep s JOIN labeling_steprating r ON r.step_id = s.id
    WHERE s.assignment_id IN ({ids}) AND r.completion_index = 0
"""


def window_quality(assignment_ids: Sequence[int]) -> AgreementSummary:
    """summarise(gold_outcomes(...)) of these finished gold items, in three statements (one round trip).

    The same judgement (_judged) of the same rows; the rolling window's.
    """
    if not assignment_ids:
        return summarise([])
    ids, params = ", ".join(["%s"] * len(assignment_ids)), list(assignment_ids)
    # All three sent before any is read: inside labeling.work.hotpath.pipelined()
    # they travel together. Prepared (annotate.postgresql), one statement per
    # window length (QC_MIN_ITEMS to QC_WINDOW of them): keyed by primary
    # keys, their plans do not depend on the values, and planning the three
    # afresh was half of their PostgreSQL time.
    with (
        prepared_cursor(connection) as items,
        prepared_cursor(connection) as gold_steps,
        prepared_cursor(connection) as own,
    ):
        items.execute(WINDOW_ITEMS.format(ids=ids), params)
        gold_steps.execute(WINDOW_GOLD.format(ids=ids), params)
        own.execute(WINDOW_RATINGS.format(ids=ids), params)
        item_rows, gold, ratings = items.fetchall(), _gold_of(gold_steps.fetchall()), _ratings_of(own.fetchall())
    judged = [
        _judged(gold[solution_id], ratings.get(pk, {}), status, finish_reason)
        for pk, status, finish_reason, solution_id in item_rows
        if solution_id in gold
    ]
    return AgreementSummary(
        items=len(judged),
        agreed=sum(agrees for agrees, _, _ in judged),
        steps_rated=sum(rated for _, _, rated in judged),
        steps_agreed=sum(agreed for _, agreed, _ in judged),
    )


def _window_digest(*, labeler: Labeler, window: Sequence[int]) -> str:
    # What the verdict depends on, apart from the gold (gold_set empties
    # qc_window_passed when that changes): the items (a finished item's
    # ratings and status are final), the status the window counts from, and
    # the thresholds it is judged by.
    since = labeler.status_changed_at
    key = (
        f"{'' if since is None else (since - _EPOCH) // timedelta(microseconds=1)}|{settings.QC_WINDOW}|"
        f"{settings.QC_MIN_ITEMS}|{settings.QC_SUSPEND_BELOW!r}|{','.join(map(str, window))}"
    )
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --- Overlap and inter-annotator agreement ------------------------------------


def overlap_labelers_needed(*, key: str, share_: float | None = None) -> int:
    """2 for a stable OVERLAP_SHARE of keys (e.g. a solution's content hash), else 1.

    Deterministic, so task creation that is retried makes the same choice.
    """
    fraction = settings.OVERLAP_SHARE if share_ is None else share_
    bucket = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2**64
    return 2 if bucket < fraction else 1


@dataclass(frozen=True)
class InterAnnotatorAgreement:
    tasks: int  # overlapped tasks with at least two submitted assignments
    alpha: float | None  # Krippendorff's alpha, ordinal, on own-step ratings
    step_units: int  # (task, step) units rated by two or more labelers
    first_error_pairs: int  # labeler pairs on the same task
    first_error_agreed: int  # of which found the same first error (or both none)

    @property
    def first_error_rate(self) -> float | None:
        return share(self.first_error_agreed, self.first_error_pairs)


@dataclass(frozen=True)
class PairAgreement:
    labeler_a: int
    labeler_b: int
    agreement: InterAnnotatorAgreement


def _overlap_rows(generation: Generation) -> dict[int, dict[int, dict[int, int | None]]]:
    """task id -> labeler id -> own-step ratings, for normal tasks with 2+ submitted assignments."""
    submitted = Assignment.objects.filter(
        task__generation=generation,
        task__kind=TaskKind.NORMAL,
        status=AssignmentStatus.SUBMITTED,
        finish_reason__in=["found_error", "solution"],
    )
    rows = list(submitted.values_list("pk", "task_id", "labeler_id"))
    per_task: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for pk, task_id, labeler_id in rows:
        per_task[task_id].append((pk, labeler_id))
    per_task = {t: v for t, v in per_task.items() if len(v) >= 2}
    ratings = own_ratings_for(assignment_ids=(pk for v in per_task.values() for pk, _ in v))
    return {t: {labeler_id: ratings.get(pk, {}) for pk, labeler_id in v} for t, v in per_task.items()}


def _iaa(tasks: dict[int, dict[int, dict[int, int | None]]]) -> InterAnnotatorAgreement:
    units: list[dict[str, int]] = []
    pairs = agreed = 0
    for by_labeler in tasks.values():
        steps = sorted({i for r in by_labeler.values() for i in r})
        for i in steps:
            unit = {str(lab): r[i] for lab, r in by_labeler.items() if r.get(i) is not None}
            units.append({k: v for k, v in unit.items() if v is not None})
        for a, b in combinations(sorted(by_labeler), 2):
            pairs += 1
            agreed += first_negative(by_labeler[a]) == first_negative(by_labeler[b])
    return InterAnnotatorAgreement(
        tasks=len(tasks),
        alpha=ordinal_alpha(units),
        step_units=sum(1 for u in units if len(u) >= 2),
        first_error_pairs=pairs,
        first_error_agreed=agreed,
    )


def generation_inter_annotator_agreement(*, generation: Generation) -> InterAnnotatorAgreement:
    """IAA on a generation's overlapped normal tasks: alpha on step ratings, first-error agreement."""
    return _iaa(_overlap_rows(generation))


def generation_inter_annotator_agreement_by_pair(*, generation: Generation) -> list[PairAgreement]:
    """The same figures for every pair of labelers who share at least one task."""
    tasks = _overlap_rows(generation)
    by_pair: dict[tuple[int, int], dict[int, dict[int, dict[int, int | None]]]] = defaultdict(dict)
    for task_id, by_labeler in tasks.items():
        for a, b in combinations(sorted(by_labeler), 2):
            by_pair[(a, b)][task_id] = {a: by_labeler[a], b: by_labeler[b]}
    return [
        PairAgreement(labeler_a=a, labeler_b=b, agreement=_iaa(shared)) for (a, b), shared in sorted(by_pair.items())
    ]
