"""Service: open phase-1 work: problems drawn uniformly, each served as its placeholder solution.

In phase 1 of the protocol labelers build a solution step by step from generated candidate
steps (labeling.work.phase_one; the candidates come from activelearn.stepgen). There is
nothing to score yet, so the problems are a uniform draw (``selection.select_uniform``, the
same rule the simulator's baseline uses) of those not yet served in phase 1. Phase 1 is
one generation (number null: ``generation_one_unnumbered_phase_1``); opening more work
adds tasks to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from activelearn.generations.config import INTEGER_MAX, GenerationConfigError, GenerationStateError
from activelearn.selection.rules import PoolCandidate, select_uniform
from labeling.models import (
    Generation,
    GenerationStatus,
    Phase,
    Problem,
    Task,
)
from labeling.work.opening import phase_one_tasks_open

SPLITS = frozenset({"train", "validation", "test", ""})


@dataclass(frozen=True)
class PhaseOneOpened:
    generation: Generation
    tasks: int
    available: int  # problems not yet served in phase 1 that matched


def phase_one_open(
    *, count: int, split: str | None = None, problem_ids: Sequence[str] | None = None, seed: int = 0
) -> PhaseOneOpened:
    """Open ``count`` phase-1 tasks on problems never served in phase 1 (fewer if fewer are left).

    Raises GenerationConfigError for a bad count or split, GenerationStateError when phase 1
    was closed (closing it is how an admin stops serving it).
    """
    if not (isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= INTEGER_MAX):
        raise GenerationConfigError(f"the number of phase-1 problems must be an integer in [1, {INTEGER_MAX}]")
    if split is not None and split not in SPLITS:
        raise GenerationConfigError("split must be train, validation, test or empty")
    with transaction.atomic():
        generation, _ = Generation.objects.get_or_create(
            number=None,
            phase=Phase.ONE,
            defaults={"status": GenerationStatus.OPEN, "started_at": timezone.now()},
        )
        if generation.status != GenerationStatus.OPEN:
            raise GenerationStateError(f"phase 1 is {generation.status}; it serves no more work")
        # Locked so that two admins opening work at once do not draw the same problems.
        Generation.objects.select_for_update().filter(pk=generation.pk).first()
        problems = Problem.objects.exclude(
            Exists(Task.objects.filter(generation=generation, solution__problem_id=OuterRef("pk")))
        )
        if split is not None:
            problems = problems.filter(split=split)
        if problem_ids is not None:
            problems = problems.filter(unique_id__in=list(problem_ids))
        ids = list(problems.order_by("pk").values_list("pk", flat=True))
        picks = select_uniform(
            [PoolCandidate(problem_id=pk, solution_id=pk, score=0.0, is_correct=None) for pk in ids],
            k_total=count,
            seed=seed,
        )
        opened = phase_one_tasks_open(generation=generation, problem_ids=[cast(int, pick.problem_id) for pick in picks])
    return PhaseOneOpened(generation=generation, tasks=opened, available=len(ids))
