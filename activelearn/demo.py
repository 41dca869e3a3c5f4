"""Service: the demo campaign: CHAMP's data (``labeling.data.demo``), its gold, its answers graded.

``labeling.data.demo`` loads the problems, every distinct conversation, the human
first-wrong-step annotations not used as gold as labeled generation-0 work, and
generation 0's open tasks. This module builds on it what that room may not import:
the screening set and generation 0's QC items from the other annotations
(``labeling.quality.gold``), and the product's grading of the final answers that are
served or that the next generation's default pool holds (``grading.service``), so
starting a generation right after ``load_demo`` has labels to train on, a pool to
score and graded wrong answers to select. With ``phase_one_problems`` it also opens
that many demo problems in the phase-1 generation (``phase_one``), as an admin's
*Start a generation* → *Phase 1* would: a labeler is served them first (phase 1's
priority is above generation 0's rest) and builds a solution from candidate steps that
the worker generates when the task screen asks for them, never at load time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Exists, OuterRef

from activelearn.generations.config import GenerationConfig
from activelearn.grading.service import solutions_grade
from activelearn.stepgen.phase_one import phase_one_open
from labeling.data.demo import ROLE_SCREENING, UNIQUE_ID_PREFIX, DemoLoadResult, demo_load
from labeling.models import Generation, GenerationStatus, Phase, Problem, Solution, Task, TaskStatus
from labeling.quality.gold import gold_from_first_errors, quality_control_set_create, screening_set_create

GOLD_NOTE = "CHAMP first-wrong-step annotation"
# Phase-1 problems `load_demo` opens: enough to see phase 1, few enough that the demo
# labeler soon reaches generation 0's phase-2 work behind them.
DEMO_PHASE_ONE_PROBLEMS = 3


@dataclass(frozen=True)
class DemoPhaseOne:
    opened: int  # phase-1 tasks this run opened
    open_tasks: int  # open phase-1 tasks on demo problems, after this run
    closed: bool  # an admin closed phase 1: it serves nothing and nothing was opened


@dataclass(frozen=True)
class DemoCampaignResult:
    data: DemoLoadResult
    gold_created: int
    screening_items: int
    quality_control_items: int
    graded: int
    phase_one: DemoPhaseOne | None = None


def demo_campaign_load(
    *,
    solutions_per_problem: int | None,
    admin_password: str,
    labeler_password: str,
    reset_passwords: bool = False,
    open_per_problem: int | None = None,
    problems: int | None = None,
    grade: bool = True,
    phase_one_problems: int = 0,
    progress: Callable[[str], None] | None = None,
) -> DemoCampaignResult:
    """Load the demo (one transaction with its gold and phase-1 work), then grade; idempotent."""
    options = {} if open_per_problem is None else {"open_per_problem": open_per_problem}
    with transaction.atomic():
        data = demo_load(
            solutions_per_problem=solutions_per_problem,
            admin_password=admin_password,
            labeler_password=labeler_password,
            reset_passwords=reset_passwords,
            problems=problems,
            progress=progress,
            **options,
        )
        solutions, created = gold_from_first_errors(
            items=[(g.solution_id, g.first_wrong) for g in data.gold], note=GOLD_NOTE
        )
        screening = [s for s, g in zip(solutions, data.gold, strict=True) if g.role == ROLE_SCREENING]
        quality_control = [s for s, g in zip(solutions, data.gold, strict=True) if g.role != ROLE_SCREENING]
        if screening:
            screening_set_create(solutions=screening)
        if quality_control:
            generation = Generation.objects.get(number=data.generation_number)
            quality_control_set_create(generation=generation, solutions=quality_control)
        if progress is not None:
            progress(
                f"Gold: {len(screening)} screening items, {len(quality_control)} QC items of generation "
                f"{data.generation_number} ({created} made gold by this run)"
            )
        phase_one = demo_phase_one_open(count=phase_one_problems) if phase_one_problems > 0 else None
    graded = 0
    if grade:
        ids = demo_solutions_to_grade()
        if ids:
            if progress is not None:
                progress(f"Grading {len(ids)} final answers against the reference answers...")
            graded = solutions_grade(solution_ids=ids)
    return DemoCampaignResult(
        data=data,
        gold_created=created,
        screening_items=len(screening),
        quality_control_items=len(quality_control),
        graded=graded,
        phase_one=phase_one,
    )


def demo_phase_one_open(*, count: int, seed: int = 0) -> DemoPhaseOne:
    """Open ``count`` demo problems in phase 1 unless some already are (idempotent); a closed phase 1 is left closed.

    No candidate is generated here: the labeler's task screen asks the worker for them.
    """
    demo_phase_one = Task.objects.filter(
        generation__phase=Phase.ONE, solution__problem__unique_id__startswith=UNIQUE_ID_PREFIX
    )
    closed = Generation.objects.filter(phase=Phase.ONE).exclude(status=GenerationStatus.OPEN).exists()
    opened = 0
    if not closed and not demo_phase_one.exists():
        ids = Problem.objects.filter(unique_id__startswith=UNIQUE_ID_PREFIX).values_list("unique_id", flat=True)
        opened = phase_one_open(count=count, problem_ids=list(ids), seed=seed).tasks
    return DemoPhaseOne(opened=opened, open_tasks=demo_phase_one.filter(status=TaskStatus.OPEN).count(), closed=closed)


def demo_solutions_to_grade() -> list[int]:
    """Never-graded demo solutions that are served, or in the next generation's default pool.

    The default pool is ``GenerationConfig().per_problem_cap`` never-served solutions
    per problem, lowest ids first (``generations.pool.pool_solution_ids``); solutions past it
    are graded by the pipeline's grading step when a generation's pool reaches them.
    """
    cap = GenerationConfig().per_problem_cap
    solutions = Solution.objects.with_steps().filter(problem__unique_id__startswith=UNIQUE_ID_PREFIX)
    served = Exists(Task.objects.filter(solution_id=OuterRef("pk")))
    never_graded = {"is_correct__isnull": True, "grading_note": ""}
    ids = list(solutions.filter(served, **never_graded).values_list("pk", flat=True))
    taken: dict[int, int] = {}
    for solution_id, problem_id, note, correct in (
        solutions.exclude(served)
        .order_by("problem_id", "id")
        .values_list("pk", "problem_id", "grading_note", "is_correct")
    ):
        count = taken.get(problem_id, 0)
        if cap is not None and count >= cap:
            continue
        taken[problem_id] = count + 1
        if correct is None and not note:
            ids.append(solution_id)
    return sorted(ids)
