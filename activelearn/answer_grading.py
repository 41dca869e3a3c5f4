"""Service: grade stored solutions' final answers against their problem's reference answer.

Writes ``Solution.is_correct`` and ``Solution.grading_note`` (the grader's reason:
"normalized-match", "equivalent", "different", "unparsable", "timeout", "error: ...",
or "no reference answer" / "no final answer"). Grading runs in killable worker
processes (``activelearn.grading.grade_many``), so one pathological answer that hangs
sympy costs ``timeout_s`` and is graded incorrect with note "timeout"; the rest of the
batch carries on.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import QuerySet

from activelearn.grading import (
    DEFAULT_TIMEOUT_S,
    Grader,
    GradeResult,
    extract_final_answer,
    grade_in_process,
    grade_many,
)
from labeling.models import Solution

# Solutions graded per pool round and per bulk UPDATE.
CHUNK = 500
NOTE_MAX = Solution._meta.get_field("grading_note").max_length or 200


def solutions_grade(
    *,
    solution_ids: Iterable[int],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    processes: int | None = None,
    grader: Grader = grade_in_process,
) -> int:
    """Grade the given solutions; returns how many were written.

    ``grader`` is the per-item function run inside the worker processes (a picklable
    top-level function); only tests pass anything else.
    """
    ids = sorted(set(solution_ids))
    written = 0
    for start in range(0, len(ids), CHUNK):
        queryset = Solution.objects.filter(id__in=ids[start : start + CHUNK]).order_by("id")
        written += _grade(queryset, timeout_s, processes, grader)
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
    while True:
        page_ids = list(
            Solution.objects.filter(id__gt=cursor, id__lte=last_id).order_by("id").values_list("id", flat=True)[:CHUNK]
        )
        if not page_ids:
            return written
        cursor = page_ids[-1]
        written += _grade(Solution.objects.filter(id__in=page_ids), timeout_s, processes, grader)


def _grade(queryset: QuerySet[Solution], timeout_s: float, processes: int | None, grader: Grader) -> int:
    rows = list(queryset.values_list("id", "steps", "final_answer", "problem__answer"))
    outcomes: dict[int, tuple[bool | None, str]] = {}
    pending: list[tuple[int, str, str]] = []
    for solution_id, steps, final_answer, reference in rows:
        given = final_answer if final_answer is not None else extract_final_answer("\n".join(steps or []))
        if reference is None or not reference.strip():
            # Nothing to grade against: leave it ungraded rather than call it wrong.
            outcomes[solution_id] = (None, "no reference answer")
        elif given is None or not given.strip():
            outcomes[solution_id] = (False, "no final answer")
        else:
            pending.append((solution_id, given, reference))
    results: list[GradeResult] = grade_many(
        [(given, reference) for _, given, reference in pending], timeout_s=timeout_s, processes=processes, grader=grader
    )
    for (solution_id, _, _), result in zip(pending, results, strict=True):
        outcomes[solution_id] = (result.correct, result.reason[:NOTE_MAX])
    objects = [
        Solution(id=solution_id, is_correct=correct, grading_note=note)
        for solution_id, (correct, note) in outcomes.items()
    ]
    with transaction.atomic():
        Solution.objects.bulk_update(objects, ["is_correct", "grading_note"], batch_size=CHUNK)
    return len(objects)
