"""Phase 1 of the protocol: the labeler builds a solution step by step from model candidates.

At each step the page shows K candidate next steps (``labeling.work.candidates``,
prefetched when the previous step was decided). The labeler rates every candidate
-1/0/+1; when none is rated +1 they write their own step (``human_completion``). The
solution then continues from the candidate they pick or their own step; without a pick
it is a random +1 candidate, else their own step, else a random 0 candidate. A final-answer
step (``# Answer``) that the solution continues with ends the task as ``solution``.

Stored exactly as a PRM800K phase-1 record reads (labeling.data.exports):

* one LabeledStep per position; its StepRating rows are the candidates in the order
  they were generated (``completion_index`` = position in ``completions``), created
  from the ready candidate set the first time the step is rated or decided;
* ``chosen_completion`` / ``human_completion`` are set when the step is decided; the
  last LabeledStep of an open assignment is the current, undecided step, and stays
  undecided (chosen null) when the labeler gives up there.

Ratings are versioned like phase 2 (labeling.work.rating): a request applies only with a
version newer than the stored one, so repeats and late requests change nothing.
Deciding a step is idempotent per step index: a repeat for a decided step is a no-op.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from labeling.models import Assignment, AssignmentStatus, CandidateSetStatus, FinishReason, LabeledStep, StepRating
from labeling.work.assignment import (
    RatingRejected,
    assignment_finish,
    assignment_lock,
    assignment_time_add,
    is_phase_one,
    rating_request_check,
)
from labeling.work.candidates import candidates_get, candidates_prefetch
from labeling.work.queue import lease_expiry
from mathtext.splitting import is_answer_step

# Not for secrets: picks which positive candidate the solution continues with.
_RNG = random.Random()

OWN_STEP = "own"


@dataclass(frozen=True)
class Candidate:
    step_index: int
    completion_index: int
    text: str
    rating: int | None
    flagged: bool
    is_current: bool = False

    @property
    def is_answer(self) -> bool:
        return is_answer_step(self.text)


@dataclass(frozen=True)
class DecidedStep:
    index: int
    text: str
    # The candidate the solution continued with, or None for the labeler's own step.
    chosen: int | None
    candidates: list[Candidate]

    @property
    def number(self) -> int:
        return self.index + 1


@dataclass(frozen=True)
class PhaseOneScreen:
    assignment: Assignment
    decided: list[DecidedStep]
    step_index: int
    # ready / pending / failed, or "" when generation is switched off or not asked for.
    status: str
    error: str
    candidates: list[Candidate]
    version: int

    @property
    def step_number(self) -> int:
        return self.step_index + 1

    @property
    def is_open(self) -> bool:
        return self.assignment.status == AssignmentStatus.IN_PROGRESS

    @property
    def all_rated(self) -> bool:
        return all(c.rating is not None for c in self.candidates)

    @property
    def any_positive(self) -> bool:
        return any(c.rating == 1 for c in self.candidates)

    @property
    def needs_own_step(self) -> bool:
        return self.all_rated and not self.any_positive

    @property
    def can_continue(self) -> bool:
        return self.is_open and self.status != CandidateSetStatus.PENDING and self.all_rated

    @property
    def acceptable(self) -> list[Candidate]:
        return [c for c in self.candidates if c.rating is not None and c.rating >= 0]

    # What app.js reads from #task-state: the rows and completions it should see.
    @property
    def row_count(self) -> int:
        return 0

    @property
    def completion_count(self) -> int:
        return len(self.candidates) if self.is_open else 0

    @property
    def current_key(self) -> str:
        current = next((c for c in self.candidates if c.is_current), None)
        return f"c-{current.step_index}-{current.completion_index}" if current else "finish"


_Steps = dict[int, tuple[int, int | None, str | None, list[StepRating]]]


def _rows(assignment: Assignment) -> _Steps:
    """step index -> (step id, chosen, human, candidate rows): two queries."""
    steps: _Steps = {
        s.index: (s.pk, s.chosen_completion, s.human_completion, [])
        for s in LabeledStep.objects.filter(assignment=assignment).order_by("index")
    }
    by_id = {value[0]: value[3] for value in steps.values()}
    for rating in StepRating.objects.filter(step__assignment=assignment).order_by("step__index", "completion_index"):
        by_id[rating.step_id].append(rating)
    return steps


def _current_index(steps: _Steps) -> int:
    for index in sorted(steps):
        _, chosen, human, _ = steps[index]
        if chosen is None and human is None:
            return index
    return len(steps)


def _candidate(step_index: int, row: StepRating) -> Candidate:
    return Candidate(step_index, row.completion_index, row.text, row.rating, bool(row.flagged))


def phase_one_screen(*, assignment: Assignment, prefetch: bool = True) -> PhaseOneScreen:
    """What the labeler sees; asks for the current step's candidates when nobody has yet."""
    steps = _rows(assignment)
    current = _current_index(steps)
    decided: list[DecidedStep] = []
    for index in sorted(steps):
        _, chosen, human, rows = steps[index]
        if index == current:
            break
        text = next((r.text for r in rows if r.completion_index == chosen), None) if chosen is not None else human
        decided.append(DecidedStep(index, text or "", chosen, [_candidate(index, r) for r in rows]))
    version = max([assignment.ratings_reset_version, *(r.version for s in steps.values() for r in s[3])])

    status, error = "", ""
    candidates: list[Candidate] = []
    if current in steps:
        status = CandidateSetStatus.READY
        candidates = [_candidate(current, r) for r in steps[current][3]]
    elif assignment.status == AssignmentStatus.IN_PROGRESS:
        stored = candidates_get(assignment_id=assignment.pk, step_index=current)
        if stored is None and prefetch and candidates_prefetch(assignment_id=assignment.pk, step_index=current):
            # The task may have run at once (eager Celery, tests); read what it left.
            stored = candidates_get(assignment_id=assignment.pk, step_index=current)
        if stored is not None:
            status, error = stored.status, stored.error
            if stored.status == CandidateSetStatus.READY:
                candidates = [Candidate(current, i, t, None, False) for i, t in enumerate(stored.texts)]
    if assignment.status == AssignmentStatus.IN_PROGRESS:
        first_unrated = next((c for c in candidates if c.rating is None), None)
        candidates = [
            Candidate(c.step_index, c.completion_index, c.text, c.rating, c.flagged, c is first_unrated)
            for c in candidates
        ]
    return PhaseOneScreen(
        assignment=assignment,
        decided=decided,
        step_index=current,
        status=str(status),
        error=error,
        candidates=candidates,
        version=version,
    )


def _open_step(
    assignment: Assignment, step_index: int, *, allow_without_candidates: bool
) -> tuple[int, list[StepRating]]:
    """The current step's row and candidate rows, creating them from the ready candidate set."""
    existing = LabeledStep.objects.filter(assignment=assignment, index=step_index).first()
    if existing is not None:
        return existing.pk, list(existing.ratings.order_by("completion_index"))
    stored = candidates_get(assignment_id=assignment.pk, step_index=step_index)
    texts: tuple[str, ...] = ()
    if stored is not None and stored.status == CandidateSetStatus.READY:
        texts = stored.texts
    elif not allow_without_candidates:
        raise RatingRejected("The candidates for this step are not ready yet.")
    # No get_or_create needed: the assignment row lock (assignment_lock) serialises writers.
    step = LabeledStep.objects.create(assignment=assignment, index=step_index)
    rows = StepRating.objects.bulk_create(
        StepRating(step=step, completion_index=i, text=text, rating=None, flagged=None) for i, text in enumerate(texts)
    )
    return step.pk, list(rows)


def phase_one_rate(
    *,
    assignment: Assignment,
    step_index: int,
    completion_index: int,
    rating: int | None,
    flagged: bool,
    version: int,
    now: datetime | None = None,
) -> bool:
    """Store one candidate's rating and flag; False when the request was stale or a repeat."""
    rating_request_check(rating=rating, version=version)
    now = now or timezone.now()
    with transaction.atomic():
        locked = assignment_lock(assignment)
        if not is_phase_one(locked):
            raise RatingRejected("This is not a phase-1 task.")
        current = _current_index(_rows(locked))
        if step_index != current:
            raise RatingRejected("This step is already decided; rate the candidates of the current step.")
        step_id, rows = _open_step(locked, step_index, allow_without_candidates=False)
        if not any(r.completion_index == completion_index for r in rows):
            raise RatingRejected("There is no such candidate.")
        if version <= locked.ratings_reset_version:
            return False
        # Conditional on the version in the statement itself, as in phase 2.
        applied = bool(
            StepRating.objects.filter(step_id=step_id, completion_index=completion_index, version__lt=version).update(
                rating=rating, flagged=flagged, version=version, updated_at=now
            )
        )
        fields = assignment_time_add(locked, now=now)
        locked.lease_expires_at = lease_expiry(now=now)
        locked.save(update_fields=[*fields, "lease_expires_at"])
    return applied


@dataclass(frozen=True)
class Continued:
    applied: bool
    # Set when this step ended the task (a final answer the solution continued with).
    finished: FinishReason | None
    # The candidate continued with, or None for the labeler's own step.
    chosen: int | None


def phase_one_continue(
    *,
    assignment: Assignment,
    step_index: int,
    choice: int | str | None,
    human_text: str,
    version: int,
    now: datetime | None = None,
    rng: random.Random | None = None,
) -> Continued:
    """Decide the current step: continue from a candidate (``choice`` = its index), from
    the labeler's own step (``choice`` = ``OWN_STEP``), or by the default rule (None).

    Every candidate must be rated first, and the labeler's own step is required when
    none is rated +1. A final-answer step ends the task as ``solution``; otherwise the
    next step's candidates are prefetched once this transaction commits.
    """
    rating_request_check(rating=None, version=version)
    now = now or timezone.now()
    rng = rng or _RNG
    human = human_text.strip() or None
    with transaction.atomic():
        locked = assignment_lock(assignment)
        if not is_phase_one(locked):
            raise RatingRejected("This is not a phase-1 task.")
        steps = _rows(locked)
        current = _current_index(steps)
        if step_index < current:
            return Continued(applied=False, finished=None, chosen=steps[step_index][1])  # a repeat
        if step_index > current:
            raise RatingRejected("This step is not reached yet.")
        step_id, rows = _open_step(locked, step_index, allow_without_candidates=human is not None)
        if any(r.rating is None for r in rows):
            raise RatingRejected("Rate every candidate first.")
        positive = [r.completion_index for r in rows if r.rating == 1]
        neutral = [r.completion_index for r in rows if r.rating == 0]
        if not positive and human is None:
            raise RatingRejected("No candidate is rated good: write your own step.")

        chosen: int | None
        if choice == OWN_STEP:
            if human is None:
                raise RatingRejected("Write your own step to continue from it.")
            chosen = None
        elif isinstance(choice, int):
            if choice not in positive and choice not in neutral:
                raise RatingRejected("Continue only from a candidate rated good or okay.")
            chosen = choice
        elif positive:
            chosen = rng.choice(positive)
        elif human is not None:
            chosen = None
        else:  # unreachable: no positive means a human step was required
            chosen = rng.choice(neutral)

        LabeledStep.objects.filter(pk=step_id).update(chosen_completion=chosen, human_completion=human)
        # A click older than this decision (a rating of this step, arriving
        # late) must not change what the solution continued from.
        locked.ratings_reset_version = max(locked.ratings_reset_version, version)
        text = human if chosen is None else next(r.text for r in rows if r.completion_index == chosen)
        assert text is not None
        if is_answer_step(text):
            locked.save(update_fields=["ratings_reset_version"])
            assignment_finish(locked, reason=FinishReason.SOLUTION, text="", now=now)
            return Continued(applied=True, finished=FinishReason.SOLUTION, chosen=chosen)
        fields = assignment_time_add(locked, now=now)
        locked.lease_expires_at = lease_expiry(now=now)
        locked.save(update_fields=[*fields, "lease_expires_at", "ratings_reset_version"])
        candidates_prefetch(assignment_id=locked.pk, step_index=step_index + 1)
    return Continued(applied=True, finished=None, chosen=chosen)


def phase_one_retry(*, assignment: Assignment, step_index: int) -> bool:
    """Ask again for the current step's candidates after a failure; True if a task was queued."""
    with transaction.atomic():
        locked = assignment_lock(assignment)
        if step_index != _current_index(_rows(locked)):
            raise RatingRejected("This step is already decided.")
        stored = candidates_get(assignment_id=locked.pk, step_index=step_index)
        if stored is not None and stored.status == CandidateSetStatus.READY:
            return False
        return candidates_prefetch(assignment_id=locked.pk, step_index=step_index)
