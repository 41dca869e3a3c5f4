"""Service: grade stored solutions' final answers against their problem's reference answer.

Writes ``Solution.is_correct`` and ``Solution.grading_note``:

* correct / wrong: ``is_correct`` true / false, the note the grader's reason
  ("normalized-match", "equivalent", "same meaning", "different", "timeout", "error: ...");
* "no answer found": the solution states no final answer; ``is_correct`` stays null, so
  such a solution is never counted (or selected) as a wrong answer;
* "no reference answer": the problem has none; ``is_correct`` stays null.

A note is written by every grading, so an empty note means never graded. The answer
is ``Solution.final_answer``, else the one extracted from the steps. Grading runs in
killable worker processes (``activelearn.grading.GradingPool``), started once per call
however many chunks it writes, so one pathological answer that hangs sympy costs
``timeout_s`` and is graded incorrect with note "timeout"; the rest carries on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, Q, QuerySet

from activelearn.grading import (
    DEFAULT_TIMEOUT_S,
    ERROR_PREFIX,
    TIMEOUT,
    Grader,
    GradingPool,
    extract_final_answer,
    grade_in_process,
)
from labeling.models import GRADING_NO_ANSWER, GRADING_NO_REFERENCE, Solution

# Solutions graded per round and per bulk UPDATE.
CHUNK = 500
NOTE_MAX = Solution._meta.get_field("grading_note").max_length or 200


def solutions_grade(
    *,
    solution_ids: Iterable[int],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    processes: int | None = None,
    grader: Grader = grade_in_process,
    progress: Callable[[int], object] | None = None,
) -> int:
    """Grade the given solutions, CHUNK at a time; returns how many were written.

    ``grader`` is the per-item function run inside the worker processes (a picklable
    top-level function); only tests pass anything else. ``progress`` is called with the
    number written after each chunk.
    """
    ids = sorted(set(solution_ids))
    written = 0
    with GradingPool(processes=processes, timeout_s=timeout_s, grader=grader) as pool:
        for start in range(0, len(ids), CHUNK):
            count = _grade(Solution.objects.filter(id__in=ids[start : start + CHUNK]), pool)
            written += count
            if progress is not None:
                progress(count)
    return written


def solutions_grade_range(
    *,
    first_id: int,
    last_id: int,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    processes: int | None = None,
    grader: Grader = grade_in_process,
) -> int:
    """Grade every solution with ``first_id <= id <= last_id``, in keyset pages."""
    written = 0
    cursor = first_id - 1
    with GradingPool(processes=processes, timeout_s=timeout_s, grader=grader) as pool:
        while True:
            page_ids = list(
                Solution.objects.filter(id__gt=cursor, id__lte=last_id)
                .order_by("id")
                .values_list("id", flat=True)[:CHUNK]
            )
            if not page_ids:
                return written
            cursor = page_ids[-1]
            written += _grade(Solution.objects.filter(id__in=page_ids), pool)


def _grade(queryset: QuerySet[Solution], pool: GradingPool) -> int:
    rows = list(queryset.order_by("id").values_list("id", "steps", "final_answer", "problem__answer"))
    outcomes: dict[int, tuple[bool | None, str]] = {}
    pending: list[tuple[int, str, str]] = []
    for solution_id, steps, final_answer, reference in rows:
        given = final_answer if final_answer is not None else extract_final_answer("\n".join(steps or []))
        if reference is None or not reference.strip():
            # Nothing to grade against: leave it ungraded rather than call it wrong.
            outcomes[solution_id] = (None, GRADING_NO_REFERENCE)
        elif given is None or not given.strip():
            outcomes[solution_id] = (None, GRADING_NO_ANSWER)
        else:
            pending.append((solution_id, given, reference))
    # The same answer to the same problem is graded once: sampled solutions repeat their
    # answers (CHAMP: 13,309 solutions, 7,121 distinct pairs), and grading is the cost.
    distinct = list(dict.fromkeys((given, reference) for _, given, reference in pending))
    graded = dict(zip(distinct, pool.grade(distinct), strict=True))
    results = [graded[(given, reference)] for _, given, reference in pending]
    for (solution_id, _, _), result in zip(pending, results, strict=True):
        # A stored answer that, read again, states nothing ("Let's check.") is no answer too.
        if result.answered:
            outcomes[solution_id] = (result.correct, result.reason[:NOTE_MAX])
        else:
            outcomes[solution_id] = (None, GRADING_NO_ANSWER)
    objects = [
        Solution(id=solution_id, is_correct=correct, grading_note=note)
        for solution_id, (correct, note) in outcomes.items()
    ]
    with transaction.atomic():
        Solution.objects.bulk_update(objects, ["is_correct", "grading_note"], batch_size=CHUNK)
    return len(objects)


@dataclass(frozen=True)
class GradeSummary:
    correct: int
    wrong: int
    no_answer: int
    no_reference: int
    timed_out: int
    errors: int
    ungraded: int

    def __str__(self) -> str:
        return (
            f"{self.correct} correct, {self.wrong} wrong ({self.timed_out} timed out, {self.errors} errors), "
            f"{self.no_answer} no answer found, {self.no_reference} without a reference answer, "
            f"{self.ungraded} not graded"
        )


def grade_summary(queryset: QuerySet[Solution]) -> GradeSummary:
    """How the solutions in ``queryset`` stand, in one aggregate query."""
    counts = queryset.aggregate(
        correct=Count("id", filter=Q(is_correct=True)),
        wrong=Count("id", filter=Q(is_correct=False)),
        no_answer=Count("id", filter=Q(is_correct__isnull=True, grading_note=GRADING_NO_ANSWER)),
        no_reference=Count("id", filter=Q(is_correct__isnull=True, grading_note=GRADING_NO_REFERENCE)),
        timed_out=Count("id", filter=Q(is_correct=False, grading_note=TIMEOUT)),
        errors=Count("id", filter=Q(is_correct=False, grading_note__startswith=ERROR_PREFIX)),
        ungraded=Count("id", filter=Q(is_correct__isnull=True, grading_note="")),
    )
    return GradeSummary(**counts)
