"""A simulated careful labeler: PRM800K phase-2 rules applied to exact step ground truth.

The labeler rates steps in order: +1 while the step is right (0 for a filler step that
neither helps nor hurts, when ``neutral_fillers``), -1 at the first wrong step, and then
stops, as PRM800K labelers did. With ``noise_rate`` each rating is flipped with that
probability to model human error: a correct step rated -1 ends the trajectory early, a
missed error lets the labeler carry on to the next step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from activelearn.prm.data import LabeledSolution, LabeledStep, RatedCompletion
from activelearn.simulation.domain import GeneratedSolution


def true_ratings(solution: GeneratedSolution, *, neutral_fillers: bool = True) -> list[int]:
    """The noiseless phase-2 trajectory: ratings up to and including the first error."""
    ratings: list[int] = []
    for step in solution.steps:
        if not step.is_correct:
            ratings.append(-1)
            break
        ratings.append(0 if neutral_fillers and step.kind == "filler" else 1)
    return ratings


@dataclass
class OracleLabeler:
    noise_rate: float = 0.0
    neutral_fillers: bool = True
    seed: int = 0
    step_labels: int = 0  # ratings handed out so far: the labeling cost
    solutions_labeled: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(f"oracle:{self.seed}")

    def label(self, problem_text: str, solution: GeneratedSolution) -> LabeledSolution:
        # Every step is its own single rated completion and the chosen one; the trajectory
        # simply ends at the -1 step, which trains exactly like a "stopped here" step.
        labeled: list[LabeledStep] = []
        for step in solution.steps:
            if not step.is_correct:
                rating = -1
            elif self.neutral_fillers and step.kind == "filler":
                rating = 0
            else:
                rating = 1
            if self.noise_rate and self._rng.random() < self.noise_rate:
                rating = 1 if rating == -1 else -1
            labeled.append(LabeledStep(completions=(RatedCompletion(step.text, rating),), chosen=0))
            if rating == -1:
                break
        self.step_labels += len(labeled)
        self.solutions_labeled += 1
        return LabeledSolution(problem_id=solution.problem_id, problem=problem_text, steps=tuple(labeled))
