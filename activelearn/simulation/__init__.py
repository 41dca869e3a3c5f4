"""Campaign simulator: a synthetic math domain with exact step labels, an oracle labeler,
selection strategies and a loop that trains and evaluates real PRMs generation by
generation. No Django imports (a test checks it). See docs/simulation.md.
"""

from activelearn.selection import PoolCandidate, Selected, select_convincing, select_uniform
from activelearn.simulation.campaign import (
    CampaignConfig,
    CampaignResult,
    Comparison,
    GenerationMetrics,
    compare_strategies,
    data_efficiency,
    labels_to_reach,
    run_campaign,
    run_campaign_config,
)
from activelearn.simulation.domain import (
    Dataset,
    DomainConfig,
    GeneratedSolution,
    GeneratedStep,
    Problem,
    build_dataset,
    generate_problems,
    sample_solutions,
)
from activelearn.simulation.oracle import OracleLabeler, true_ratings

__all__ = [
    "CampaignConfig",
    "CampaignResult",
    "Comparison",
    "Dataset",
    "DomainConfig",
    "GeneratedSolution",
    "GeneratedStep",
    "GenerationMetrics",
    "OracleLabeler",
    "PoolCandidate",
    "Problem",
    "Selected",
    "build_dataset",
    "compare_strategies",
    "data_efficiency",
    "generate_problems",
    "labels_to_reach",
    "run_campaign",
    "run_campaign_config",
    "sample_solutions",
    "select_convincing",
    "select_uniform",
    "true_ratings",
]
