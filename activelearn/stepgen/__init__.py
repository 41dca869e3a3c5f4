"""Step generation: K candidate next steps for a partial solution (phase 1 of the protocol).

Plain Python (httpx, torch/transformers for the local backend); nothing here imports
Django, so a backend runs the same in a Celery worker, a script or a test. The Django
side is ``activelearn.stepgen.service`` (settings, generating in a worker) and the candidate
store ``labeling.work.candidates``.

``activelearn.stepgen.local_lm`` imports torch; import it only where a local model runs.
"""

from __future__ import annotations

from activelearn.stepgen.base import (
    DEFAULT_PROMPT_TEMPLATE,
    PromptTemplate,
    SamplingParams,
    SamplingRecord,
    StepCandidates,
    StepGenerationError,
    StepGenerator,
)
from activelearn.stepgen.openai_http import OpenAICompletionsGenerator
from mathtext.splitting import ANSWER_MARKER, FirstStep, first_step

__all__ = [
    "ANSWER_MARKER",
    "DEFAULT_PROMPT_TEMPLATE",
    "FirstStep",
    "OpenAICompletionsGenerator",
    "PromptTemplate",
    "SamplingParams",
    "SamplingRecord",
    "StepCandidates",
    "StepGenerationError",
    "StepGenerator",
    "first_step",
]
