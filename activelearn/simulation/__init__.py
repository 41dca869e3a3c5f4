"""Campaign simulator: a synthetic math domain with exact step labels (random corruptions
or a generator's misconceptions), an oracle labeler, automatic Math-Shepherd labels, the
arms of the small-scale study and a loop that trains and evaluates real PRMs and ORMs
generation by generation. No Django imports (a test checks it). See docs/simulation.md.
"""

from activelearn.selection.rules import PoolCandidate, Selected, select_convincing, select_uniform
from activelearn.simulation.arms import ARMS, Arm
from activelearn.simulation.campaign import (
    CampaignConfig,
    CampaignResult,
    Comparison,
    GenerationMetrics,
    compare_strategies,
    run_campaign,
    run_campaign_config,
)
from activelearn.simulation.domain import (
    Dataset,
    DomainConfig,
    GeneratedSolution,
    GeneratedStep,
    Misconception,
    Problem,
    build_dataset,
    continue_solution,
    generate_problems,
    sample_solutions,
)
from activelearn.simulation.oracle import OracleLabeler, true_ratings
from activelearn.simulation.shepherd import ShepherdLabels, rollout_shares
from activelearn.simulation.stats import data_efficiency, labels_to_reach
from activelearn.simulation.study import Study, Sweep, run_study, run_sweep

__all__ = [
    "ARMS",
    "Arm",
    "CampaignConfig",
    "CampaignResult",
    "Comparison",
    "Dataset",
    "DomainConfig",
    "GeneratedSolution",
    "GeneratedStep",
    "GenerationMetrics",
    "Misconception",
    "OracleLabeler",
    "PoolCandidate",
    "Problem",
    "Selected",
    "ShepherdLabels",
    "Study",
    "Sweep",
    "build_dataset",
    "compare_strategies",
    "continue_solution",
    "data_efficiency",
    "generate_problems",
    "labels_to_reach",
    "rollout_shares",
    "run_campaign",
    "run_campaign_config",
    "run_study",
    "run_sweep",
    "sample_solutions",
    "select_convincing",
    "select_uniform",
    "true_ratings",
]
