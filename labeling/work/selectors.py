"""Reads about labelers and their work: what a labeler is credited with (home page and admin alike), the task screen."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time
from typing import Any, cast

from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from labeling.models import Assignment, AssignmentStatus, FinishReason, Labeler, Problem, StepRating
from labeling.work.progress import Progress, progress_compute

# Work a labeler is credited with, on their home page and in the admin alike:
# what they submitted and what they still hold. Ratings on an expired lease do
# not count (the task went to someone else).
CREDITED_STATUSES = (AssignmentStatus.SUBMITTED, AssignmentStatus.IN_PROGRESS)


def step_labels() -> QuerySet[StepRating]:
    """Step labels: rated completions (the step itself or an alternative, as PRM800K counts them) of credited work."""
    return StepRating.objects.filter(step__assignment__status__in=CREDITED_STATUSES, rating__isnull=False)


@dataclass(frozen=True)
class LabelerStats:
    solutions_today: int
    solutions_total: int
    steps_today: int
    steps_total: int


def labeler_stats(*, labeler: Labeler, now: datetime | None = None) -> LabelerStats:
    now = now or timezone.now()
    today = timezone.make_aware(datetime.combine(timezone.localdate(now), time.min))
    solutions = Assignment.objects.filter(labeler=labeler, status=AssignmentStatus.SUBMITTED).aggregate(
        total=Count("pk"), today=Count("pk", filter=Q(submitted_at__gte=today))
    )
    steps = (
        step_labels()
        .filter(step__assignment__labeler=labeler)
        .aggregate(total=Count("pk"), today=Count("pk", filter=Q(updated_at__gte=today)))
    )
    return LabelerStats(
        solutions_today=solutions["today"],
        solutions_total=solutions["total"],
        steps_today=steps["today"],
        steps_total=steps["total"],
    )


def labelers_with_counts(queryset: QuerySet[Labeler]) -> QuerySet[Labeler]:
    """Labelers with ``n_solutions``, ``n_give_up``, ``n_steps``, ``n_flagged`` and ``time_ms`` of their work.

    Correlated subqueries, so a page of labelers is one query with no join
    fan-out. Solutions are submitted ones; steps and time are of credited work.
    """

    def per_labeler(qs: QuerySet[Any], labeler_field: str, aggregate: Count | Sum) -> Coalesce:
        value = qs.order_by().values(labeler_field).annotate(v=aggregate).values("v")
        return Coalesce(Subquery(value[:1]), 0, output_field=IntegerField())

    submitted = Assignment.objects.filter(labeler=OuterRef("pk"), status=AssignmentStatus.SUBMITTED)
    credited = Assignment.objects.filter(labeler=OuterRef("pk"), status__in=CREDITED_STATUSES)
    labels = step_labels().filter(step__assignment__labeler=OuterRef("pk"))
    return queryset.annotate(
        n_solutions=per_labeler(submitted, "labeler_id", Count("pk")),
        n_give_up=per_labeler(submitted.filter(finish_reason=FinishReason.GIVE_UP), "labeler_id", Count("pk")),
        n_steps=per_labeler(labels, "step__assignment__labeler_id", Count("pk")),
        n_flagged=per_labeler(labels.filter(flagged=True), "step__assignment__labeler_id", Count("pk")),
        time_ms=per_labeler(credited, "labeler_id", Sum("total_time_ms")),
    )


def labeler_seconds_per_step(*, labeler: Labeler) -> list[float]:
    """Seconds per step label of each credited assignment with any (for a median: one long task is not typical)."""
    per_assignment = (
        Assignment.objects.filter(labeler=labeler, status__in=CREDITED_STATUSES, total_time_ms__isnull=False)
        .annotate(n=Count("labeled_steps__ratings", filter=Q(labeled_steps__ratings__rating__isnull=False)))
        .filter(n__gt=0)
        .values_list("total_time_ms", "n")
    )
    return [(ms or 0) / 1000 / n for ms, n in per_assignment]


def assignment_current(*, labeler: Labeler) -> Assignment | None:
    return Assignment.objects.filter(labeler=labeler, status=AssignmentStatus.IN_PROGRESS).first()


@dataclass(frozen=True)
class CompletionRow:
    step_index: int
    completion_index: int
    text: str
    rating: int | None
    flagged: bool
    is_current: bool


@dataclass(frozen=True)
class StepRow:
    own: CompletionRow
    alternatives: list[CompletionRow] = field(default_factory=list)
    is_error: bool = False

    @property
    def index(self) -> int:
        return self.own.step_index

    @property
    def number(self) -> int:
        return self.own.step_index + 1


@dataclass(frozen=True)
class FinishBox:
    """What the submit box of a phase-2 task shows for one state of it (task.html#finish-box)."""

    assignment_id: int
    version: int  # the state the submit is aimed at
    progress: Progress

    @property
    def ready_reason(self) -> FinishReason | None:
        return self.progress.ready_reason


@dataclass(frozen=True)
class TaskScreen:
    assignment: Assignment
    rows: list[StepRow]
    progress: Progress
    # The assignment's state version (never below a rating version): key
    # presses are aimed at it, and a plain-form click numbers itself above it.
    # Was: the highest rating version stored; the page numbers its
    # next click above it, and drops an htmx response older than one it has.
    version: int
    step_count: int
    # The steps after the last one shown, while labeling goes on and has not
    # stopped at an error: the page keeps them hidden and reveals the next
    # one as soon as a key press moves past the last shown (static/js/app.js),
    # so a press is never aimed at a step that is not on screen yet.
    ahead: list[StepRow] = field(default_factory=list)

    @property
    def problem(self) -> Problem:
        # Read only by the full panel; a partial htmx answer never loads it.
        return self.assignment.task.solution.problem

    @property
    def completion_count(self) -> int:
        return sum(1 + len(row.alternatives) for row in self.rows)

    def completion(self, step_index: int, completion_index: int) -> CompletionRow | None:
        if not 0 <= step_index < len(self.rows):
            return None
        row = self.rows[step_index]
        return next((c for c in [row.own, *row.alternatives] if c.completion_index == completion_index), None)

    @property
    def ready_reason(self) -> FinishReason | None:
        return self.progress.ready_reason

    @property
    def is_open(self) -> bool:
        return self.assignment.status == AssignmentStatus.IN_PROGRESS

    @property
    def current_key(self) -> str:
        """DOM id of the completion the keyboard acts on first, or of the submit button."""
        return self.progress.current_key if self.is_open else "finish"

    @property
    def finish(self) -> FinishBox:
        return FinishBox(assignment_id=self.assignment.pk, version=self.version, progress=self.progress)


RatingTuple = tuple[int, int, str, int | None, bool | None, int]
Ratings = list[RatingTuple]


_RATING_FIELDS = tuple(
    f"labeled_steps__ratings__{name}" for name in ("completion_index", "text", "rating", "flagged", "version")
)


def task_screen(*, assignment: Assignment) -> TaskScreen:
    """The screen as stored now: the ratings and the state version (and status) read in one statement.

    ``assignment`` was read a moment earlier (the ownership check). A press
    stored since then would pair its rating with the older version: the page
    would show it and aim the next press at a state that no longer is, which
    the server refuses as if made in another tab. One statement reads both
    from one snapshot, on PostgreSQL and SQLite alike; ``assignment`` is
    brought up to that snapshot.
    """
    rows = list(
        Assignment.objects.filter(pk=assignment.pk)
        .order_by("labeled_steps__index", "labeled_steps__ratings__completion_index")
        .values_list("version", "status", "finish_reason", "labeled_steps__index", *_RATING_FIELDS)
    )
    if rows:
        assignment.version, assignment.status, assignment.finish_reason = rows[0][:3]
    # A step row without ratings (or no step at all) comes as one row of nulls (outer joins).
    ratings: Ratings = [cast(RatingTuple, row[3:]) for row in rows if row[4] is not None]
    return task_screen_from(assignment=assignment, ratings=ratings)


def task_screen_from(*, assignment: Assignment, ratings: Ratings) -> TaskScreen:
    """The screen from ratings already in hand (the rating service returns them): no query."""
    solution = assignment.task.solution
    steps: list[str] = solution.steps or []
    own = {i: r for i, c, _t, r, _f, _v in ratings if c == 0}
    first = progress_compute(step_count=len(steps), own_ratings=own, alternative_ratings={})
    alternatives = {c: r for i, c, _t, r, _f, _v in ratings if c > 0 and i == first.stop_index}
    progress = progress_compute(step_count=len(steps), own_ratings=own, alternative_ratings=alternatives)
    version = assignment.version

    open_ = assignment.status == AssignmentStatus.IN_PROGRESS
    by_index: dict[int, list[CompletionRow]] = {}
    first_pending_alt = progress.alternatives_pending[0] if progress.alternatives_pending else None
    for i, c, text, rating, flagged, _v in ratings:
        current = open_ and c > 0 and c == first_pending_alt and i == progress.stop_index
        by_index.setdefault(i, []).append(CompletionRow(i, c, text, rating, bool(flagged), current))

    rows: list[StepRow] = []
    # Revealed steps: every labeled one, plus the next unrated step while labeling.
    last_shown = min(progress.stop_index, len(steps) - 1)
    if not open_:
        last_shown = max(by_index, default=-1)
    for i in range(last_shown + 1):
        completions = by_index.get(i, [])
        own_row = next((c for c in completions if c.completion_index == 0), None)
        if own_row is None:
            own_row = CompletionRow(i, 0, steps[i], None, False, False)
        if open_ and i == progress.stop_index and not progress.stopped_at_error and own_row.rating is None:
            own_row = CompletionRow(i, 0, own_row.text, own_row.rating, own_row.flagged, True)
        rows.append(
            StepRow(
                own=own_row,
                alternatives=[c for c in completions if c.completion_index > 0],
                is_error=progress.stopped_at_error and i == progress.stop_index,
            )
        )
    ahead: list[StepRow] = []
    if open_ and not progress.stopped_at_error:
        ahead = [
            StepRow(own=CompletionRow(i, 0, steps[i], None, False, False)) for i in range(last_shown + 1, len(steps))
        ]
    return TaskScreen(
        assignment=assignment,
        rows=rows,
        progress=progress,
        version=version,
        step_count=len(steps),
        ahead=ahead,
    )
