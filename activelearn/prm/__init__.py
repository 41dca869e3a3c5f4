"""Process reward model (PRM): backbone + step-separator head, training, scoring, evaluation.

Nothing in this package imports Django, so it runs in Celery workers, scripts and
``accelerate launch`` alike. Names are loaded lazily: importing ``activelearn.prm`` does
not pull in torch until one of them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from activelearn.prm.data import (
        LabeledSolution,
        LabeledStep,
        NeutralHandling,
        Objective,
        OutcomeSolution,
        OutcomeTargets,
        RatedCompletion,
        StepExample,
        build_examples,
        split_by_problem,
    )
    from activelearn.prm.evaluation import (
        BestOfNResult,
        Candidate,
        FirstErrorMetrics,
        auroc,
        best_of_n,
        first_error_metrics,
        labeled_step_auroc,
    )
    from activelearn.prm.modeling import PRMConfig, ProcessRewardModel
    from activelearn.prm.scoring import Solution, SolutionScore, score_solutions
    from activelearn.prm.training import TrainConfig, TrainResult, train_prm

_EXPORTS = {
    "LabeledSolution": "data",
    "LabeledStep": "data",
    "NeutralHandling": "data",
    "Objective": "data",
    "OutcomeSolution": "data",
    "OutcomeTargets": "data",
    "RatedCompletion": "data",
    "StepExample": "data",
    "build_examples": "data",
    "split_by_problem": "data",
    "BestOfNResult": "evaluation",
    "Candidate": "evaluation",
    "FirstErrorMetrics": "evaluation",
    "auroc": "evaluation",
    "best_of_n": "evaluation",
    "first_error_metrics": "evaluation",
    "labeled_step_auroc": "evaluation",
    "PRMConfig": "modeling",
    "ProcessRewardModel": "modeling",
    "Solution": "scoring",
    "SolutionScore": "scoring",
    "score_solutions": "scoring",
    "TrainConfig": "training",
    "TrainResult": "training",
    "train_prm": "training",
}

__all__ = [
    "BestOfNResult",
    "Candidate",
    "FirstErrorMetrics",
    "LabeledSolution",
    "LabeledStep",
    "NeutralHandling",
    "Objective",
    "OutcomeSolution",
    "OutcomeTargets",
    "PRMConfig",
    "ProcessRewardModel",
    "RatedCompletion",
    "Solution",
    "SolutionScore",
    "StepExample",
    "TrainConfig",
    "TrainResult",
    "auroc",
    "best_of_n",
    "build_examples",
    "first_error_metrics",
    "labeled_step_auroc",
    "score_solutions",
    "split_by_problem",
    "train_prm",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"activelearn.prm.{module}"), name)
