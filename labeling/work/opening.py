"""Service: a generation's tasks opened for labeling.

activelearn decides which solutions a generation serves, in which order and why;
labeling owns the rows that serve them: each task's priority (the queue serves higher
first), how many labelers it needs (overlap), its status, and the gold solutions added
to the generation as quality control. Both functions run inside the caller's
transaction, so a generation opens with its tasks or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from labeling.models import Generation, SelectionReason, Solution, Task, TaskKind, TaskStatus, content_sha256
from labeling.quality.control import overlap_labelers_needed
from labeling.quality.gold import quality_control_top_up

# Phase-1 tasks sit in the queue beside phase-2 ones, which are ordered by PRM score in
# [0, 1] (generation_tasks_open): 0 serves them after a generation's convincing picks and
# before the demo's unselected generation-0 rest (below 0).
PHASE_ONE_PRIORITY = 0.0


@dataclass(frozen=True)
class Pick:
    """A solution a generation serves: what the selection ranked it by, and why it was picked."""

    solution_id: int
    score: float
    reason: SelectionReason


@dataclass(frozen=True)
class GenerationOpened:
    tasks: int
    quality_control: int  # the generation's QC pool, after topping it up


def generation_tasks_open(
    *, generation: Generation, picks: Sequence[Pick], overlap_share: float | None, qc_items: int
) -> GenerationOpened:
    """Open a phase-2 generation's tasks, ``picks`` in the order they are to be served,
    and top its QC pool up to ``qc_items`` gold solutions."""
    # The queue serves higher priority first (then lower id). The picks' own scores,
    # highest first, are handed out along the serving order: the queue follows it,
    # and priorities keep the scale they are compared on across open generations.
    priorities = sorted((pick.score for pick in picks), reverse=True)
    contents = dict(
        Solution.objects.filter(pk__in=[pick.solution_id for pick in picks]).values_list("pk", "content_sha256")
    )
    Task.objects.bulk_create(
        [
            Task(
                generation=generation,
                solution_id=pick.solution_id,
                kind=TaskKind.NORMAL,
                priority=priority,
                verifier_score=pick.score,
                labelers_needed=overlap_labelers_needed(key=contents[pick.solution_id], share_=overlap_share),
                status=TaskStatus.OPEN,
                selection_reason=pick.reason,
            )
            for pick, priority in zip(picks, priorities, strict=True)
        ]
    )
    quality_control = quality_control_top_up(generation=generation, count=qc_items)
    return GenerationOpened(tasks=len(picks), quality_control=quality_control)


def phase_one_tasks_open(*, generation: Generation, problem_ids: Sequence[int]) -> int:
    """Open a phase-1 task on each problem, in the order given; returns how many opened."""
    placeholder_hash = content_sha256(None, None)
    tasks = []
    for problem_id in problem_ids:
        # The problem's placeholder (no steps): what a phase-1 task points at.
        placeholder, _ = Solution.objects.get_or_create(
            problem_id=problem_id, content_sha256=placeholder_hash, source_model="", defaults={"steps": None}
        )
        tasks.append(
            Task(
                generation=generation,
                solution=placeholder,
                kind=TaskKind.NORMAL,
                priority=PHASE_ONE_PRIORITY,
                status=TaskStatus.OPEN,
                selection_reason=SelectionReason.UNIFORM,
            )
        )
    Task.objects.bulk_create(tasks)
    return len(tasks)
