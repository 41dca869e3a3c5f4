"""The arms of the small-scale study (Lightman et al. 2023, section 4): how a generation's
solutions are chosen, and who labels them.

Every arm spends the same budget per generation, ``labels_per_generation`` solutions, on
a fresh pool, and trains the same model from the same pretrained backbone on what it got:

* ``uniform``: a uniform sample, rated step by step by the oracle (a careful labeler).
* ``convincing-<share>-<scope>``: the PRM800K rule (``selection.select_convincing``), the
  previous generation's PRM scoring the pool; ``share`` of the picks wrong-answer, capped
  per problem (``per-problem``, ``CampaignConfig.k_per_problem``) or not (``global``).
* ``orm``: the uniform sample's final answers graded (outcome labels), an ORM trained on
  them (``TrainConfig(objective="outcome")``, scored by its last step).
* ``orm-pool``: an ORM on every graded pool solution drawn so far: grading costs no label.
* ``shepherd-hard`` / ``shepherd-soft``: the uniform sample labeled by rollouts
  (``simulation.shepherd``), no person involved.

The arms that sample uniformly draw exactly the uniform arm's solutions (same seed), so
they differ from it only in the labels: PRM against ORM, and oracle against automatic
labels, at equal labeled solutions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Selection = Literal["uniform", "convincing"]
LabelSource = Literal["oracle", "outcome", "outcome_pool", "shepherd_hard", "shepherd_soft"]
# Labels a person gives; the others come from the grader or the generator.
HUMAN_LABELS: frozenset[LabelSource] = frozenset({"oracle"})


@dataclass(frozen=True)
class Arm:
    name: str
    selection: Selection = "uniform"
    wrong_share: float = 0.8
    per_problem: bool = True  # convincing: cap picks per problem (CampaignConfig.k_per_problem)
    labels: LabelSource = "oracle"

    def __post_init__(self) -> None:
        if self.selection not in ("uniform", "convincing"):
            raise ValueError(f"arm {self.name!r}: selection must be 'uniform' or 'convincing', got {self.selection!r}")
        if not 0.0 <= self.wrong_share <= 1.0:
            raise ValueError(f"arm {self.name!r}: wrong_share must be within [0, 1], got {self.wrong_share!r}")
        if self.labels not in ("oracle", "outcome", "outcome_pool", "shepherd_hard", "shepherd_soft"):
            raise ValueError(f"arm {self.name!r}: unknown label source {self.labels!r}")

    @property
    def is_orm(self) -> bool:
        return self.labels in ("outcome", "outcome_pool")


def _convincing(share: float, per_problem: bool) -> Arm:
    scope = "per-problem" if per_problem else "global"
    return Arm(f"convincing-{share:.1f}-{scope}", "convincing", share, per_problem)


ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        # In the order a study runs them: the comparisons the study exists for first.
        Arm("uniform"),
        _convincing(0.8, True),
        Arm("orm", labels="outcome"),
        Arm("shepherd-soft", labels="shepherd_soft"),
        _convincing(1.0, False),
        Arm("shepherd-hard", labels="shepherd_hard"),
        _convincing(0.8, False),
        _convincing(1.0, True),
        Arm("orm-pool", labels="outcome_pool"),
    )
}
# The convincing arm the campaign's two-strategy comparison and the sweep use.
MAIN_CONVINCING = "convincing-0.8-per-problem"


def arm_named(name: str) -> Arm:
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r}; known: {sorted(ARMS)}")
    return ARMS[name]
