"""Step generation, Django side: settings -> generator, and generating a slot's candidates in a worker.

labeling.work.candidates claims an (assignment, step) slot and sends the
``generate_step_candidates`` task (activelearn.tasks) on ``STEPGEN_QUEUE``
("gpu" for the local backend, "cpu" for the HTTP one). The task calls
``candidates_generate``, which reads the solution prefix, asks the generator
and stores the candidates or the error in labeling's candidate store.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from activelearn.stepgen.base import (
    PromptTemplate,
    SamplingParams,
    StepGenerationError,
    StepGenerator,
)
from activelearn.stepgen.builtin import BUILTIN_SMOLLM2, local_model_problem
from activelearn.stepgen.openai_http import OpenAICompletionsGenerator
from labeling.models import Assignment, LabeledStep
from labeling.work.assignment import is_phase_one
from labeling.work.candidates import CandidateStore, StoredCandidates, candidate_store

logger = logging.getLogger(__name__)


def _sampling_params() -> SamplingParams:
    return SamplingParams(
        k=settings.STEPGEN_K,
        temperature=settings.STEPGEN_TEMPERATURE,
        top_p=settings.STEPGEN_TOP_P,
        max_tokens=settings.STEPGEN_MAX_TOKENS,
        seed=settings.STEPGEN_SEED,
    )


def _prompt_template() -> PromptTemplate:
    path = settings.STEPGEN_PROMPT_TEMPLATE_FILE
    return PromptTemplate(Path(path).read_text(encoding="utf-8")) if path else PromptTemplate()


@functools.cache
def _generator_for(backend: str, key: tuple[Any, ...]) -> StepGenerator:
    # Keyed on every setting it reads, so override_settings in tests gets a fresh one
    # while a worker loads a local model once.
    if backend == "openai":
        return OpenAICompletionsGenerator(
            base_url=settings.STEPGEN_OPENAI_BASE_URL,
            model=settings.STEPGEN_OPENAI_MODEL,
            api_key=settings.STEPGEN_OPENAI_API_KEY,
            params=_sampling_params(),
            prompt_template=_prompt_template(),
            timeout_s=settings.STEPGEN_TIMEOUT_S,
            retries=settings.STEPGEN_RETRIES,
        )
    # Imported here: torch is loaded only in processes that run the local model.
    from activelearn.stepgen.local_lm import LocalLMGenerator

    return LocalLMGenerator.load(
        settings.STEPGEN_LOCAL_MODEL_DIR,
        device=settings.STEPGEN_LOCAL_DEVICE or None,
        params=_sampling_params(),
        prompt_template=_prompt_template(),
    )


def step_generator() -> StepGenerator | None:
    """The configured generator, or None when ``STEPGEN_BACKEND`` is "none"."""
    backend = settings.STEPGEN_BACKEND
    if backend == "none":
        return None
    key = tuple(getattr(settings, name) for name in sorted(dir(settings)) if name.startswith("STEPGEN_"))
    return _generator_for(backend, key)


# What scripts/run-embedded.sh sets: the built-in model, on CPU unless a GPU is there.
ENABLE_LOCAL = f"STEPGEN_BACKEND=local STEPGEN_LOCAL_MODEL_DIR={BUILTIN_SMOLLM2}"


def step_generator_problem() -> str | None:
    """Why phase-1 candidates cannot be generated with the current settings, and how to enable them; None if
    they can (as far as can be told without loading a model, which the worker does).

    Cheap (no model is loaded, torch is not imported): ``load_demo`` calls it.
    """
    backend = settings.STEPGEN_BACKEND
    if backend == "none":
        return f"step generation is switched off (STEPGEN_BACKEND=none); set {ENABLE_LOCAL} (make run does)"
    if backend != "local":
        return None
    problem = local_model_problem(settings.STEPGEN_LOCAL_MODEL_DIR)
    return None if problem is None else f"the local step generator cannot be loaded: {problem}"


class StepPrefixError(ValueError):
    """The steps before ``step_index`` are not known yet."""


def step_prefix(*, assignment_id: int, step_index: int) -> tuple[str, list[str]]:
    """The problem and the steps before ``step_index`` of an assignment's trajectory.

    Phase 2: the pre-generated steps. Phase 1 (solution without steps): the steps the
    labeler continued with, i.e. the chosen completion or their own step at each index.
    """
    assignment = Assignment.objects.select_related("task__solution__problem").get(pk=assignment_id)
    solution = assignment.task.solution
    problem = solution.problem.problem
    if not is_phase_one(assignment):
        given = solution.steps or []
        if step_index > len(given):
            raise StepPrefixError(f"solution {solution.pk} has {len(given)} steps, not {step_index}")
        return problem, list(given[:step_index])
    labeled = list(
        LabeledStep.objects.filter(assignment_id=assignment_id, index__lt=step_index)
        .prefetch_related("ratings")
        .order_by("index")
    )
    steps: list[str] = []
    for expected, step in enumerate(labeled):
        if step.index != expected:
            raise StepPrefixError(f"assignment {assignment_id} has no step {expected} yet")
        if step.chosen_completion is None:
            if step.human_completion is None:
                raise StepPrefixError(f"assignment {assignment_id} step {expected} has no chosen step")
            steps.append(step.human_completion)
            continue
        texts = {rating.completion_index: rating.text for rating in step.ratings.all()}
        if step.chosen_completion not in texts:
            raise StepPrefixError(f"assignment {assignment_id} step {expected} chose a completion it does not have")
        steps.append(texts[step.chosen_completion])
    if len(steps) != step_index:
        raise StepPrefixError(f"assignment {assignment_id} has {len(steps)} steps before step {step_index}")
    return problem, steps


def candidates_generate(
    *,
    assignment_id: int,
    step_index: int,
    store: CandidateStore | None = None,
    generator: StepGenerator | None = None,
) -> StoredCandidates:
    """Generate and store candidates for (assignment, step); a failure is stored, not raised."""
    store = store or candidate_store()
    try:
        # Loaded inside the try: a model that cannot be loaded (package missing, bad
        # file) is stored as this slot's failure, which the labeler's screen shows
        # with Try again, instead of leaving the slot pending until it goes stale.
        generator = generator or step_generator()
        if generator is None:
            raise StepGenerationError("STEPGEN_BACKEND is 'none': step generation is switched off")
        problem, steps = step_prefix(assignment_id=assignment_id, step_index=step_index)
        candidates = generator.generate(problem=problem, steps=steps)
    except (StepGenerationError, StepPrefixError, Assignment.DoesNotExist) as exc:
        logger.warning("step candidates for assignment %s step %s failed: %s", assignment_id, step_index, exc)
        store.save_failed(assignment_id=assignment_id, step_index=step_index, error=str(exc), now=timezone.now())
    else:
        details = candidates.as_dict()
        texts = details.pop("texts")
        store.save_ready(
            assignment_id=assignment_id, step_index=step_index, texts=texts, sampling=details, now=timezone.now()
        )
    stored = store.get(assignment_id=assignment_id, step_index=step_index)
    if stored is None:
        raise RuntimeError(f"candidate store lost assignment {assignment_id} step {step_index} right after saving it")
    return stored
