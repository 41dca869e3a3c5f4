"""The generator that a generation samples its pool from, built from the SAMPLING_* settings.

Kept apart from the sampling step (``activelearn.generations.sampling``) so that starting
a generation can check the settings without importing the step: a misconfiguration is
refused at the start, not found by a worker.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from django.conf import settings

from activelearn.stepgen.base import PromptTemplate, SamplingParams, SolutionSampler, StepGenerationError
from activelearn.stepgen.builtin import local_model_problem
from activelearn.stepgen.openai_http import OpenAICompletionsGenerator


def _params() -> SamplingParams:
    return SamplingParams(
        k=1,  # unused: the number of draws is asked per call
        temperature=settings.SAMPLING_TEMPERATURE,
        top_p=settings.SAMPLING_TOP_P,
        max_tokens=settings.SAMPLING_MAX_TOKENS,
        seed=settings.SAMPLING_SEED,
    )


@functools.cache
def _sampler_for(backend: str, key: tuple[Any, ...]) -> SolutionSampler:
    # Keyed on every SAMPLING_* setting, so a changed setting (tests' override_settings)
    # builds a new one while a worker keeps its connections or its loaded model.
    path = settings.SAMPLING_PROMPT_TEMPLATE_FILE
    template = PromptTemplate(Path(path).read_text(encoding="utf-8")) if path else PromptTemplate()
    if backend == "openai":
        return OpenAICompletionsGenerator(
            base_url=settings.SAMPLING_OPENAI_BASE_URL,
            model=settings.SAMPLING_OPENAI_MODEL,
            api_key=settings.SAMPLING_OPENAI_API_KEY,
            params=_params(),
            prompt_template=template,
            timeout_s=settings.SAMPLING_TIMEOUT_S,
            retries=settings.SAMPLING_RETRIES,
            backoff_s=settings.SAMPLING_BACKOFF_S,
        )
    # Imported here: torch is loaded only in processes that run the local model.
    from activelearn.stepgen.local_lm import LocalLMGenerator

    return LocalLMGenerator.load(
        settings.SAMPLING_LOCAL_MODEL_DIR,
        device=settings.SAMPLING_LOCAL_DEVICE or None,
        params=_params(),
        prompt_template=template,
    )


def solution_sampler() -> SolutionSampler:
    """The configured sampler; StepGenerationError when sampling is off or the model cannot load."""
    backend = settings.SAMPLING_BACKEND
    if backend == "none":
        raise StepGenerationError("SAMPLING_BACKEND is 'none': sampling is switched off")
    key = tuple(getattr(settings, name) for name in sorted(dir(settings)) if name.startswith("SAMPLING_"))
    return _sampler_for(backend, key)


def sampling_problem() -> str | None:
    """Why a generation cannot sample with the current settings, and how to fix it; None if it
    can as far as can be told without a request or loading a model. Cheap: a generation's
    start calls it, so a misconfiguration is refused there rather than in a worker."""
    backend = settings.SAMPLING_BACKEND
    if backend == "none":
        return (
            "sample_n needs a generator: set SAMPLING_BACKEND=openai with SAMPLING_OPENAI_BASE_URL and "
            "SAMPLING_OPENAI_MODEL (vLLM, SGLang or llama.cpp's server), or SAMPLING_BACKEND=local with "
            "SAMPLING_LOCAL_MODEL_DIR (docs/operations.md, Sampling)"
        )
    if backend == "local":
        problem = local_model_problem(settings.SAMPLING_LOCAL_MODEL_DIR)
        return None if problem is None else f"the local sampler cannot be loaded: {problem}"
    return None


def sampling_queue() -> str:
    """Where sampling chunks run: the GPU queue when the model is loaded in the worker."""
    return settings.PIPELINE_GPU_QUEUE if settings.SAMPLING_BACKEND == "local" else settings.PIPELINE_CPU_QUEUE
