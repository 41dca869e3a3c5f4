"""Automatic process labels in the manner of Math-Shepherd (Wang et al. 2024).

Each step of a sampled solution is labeled by what the generator makes of it: the
solution is cut after the step, the simulated generator completes the prefix ``rollouts``
times (``domain.continue_solution``), and the completions' final answers are graded.
*Hard* estimation rates the step +1 when any completion reaches the right answer, -1
when none does; *soft* estimation gives the share that do. No person rates anything; the
cost is the rollouts.

A prefix whose written values already went wrong is completed from those values, so its
completions miss the right answer and its share is 0 (unless a later error happens to
cancel it); a right prefix is completed into a right answer as often as the generator gets
the rest right, which is below 1 when the rest is hard for it. That is the method's known
noise: a correct step followed by a step the generator usually gets wrong looks wrong.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from activelearn.prm.data import LabeledSolution, LabeledStep, RatedCompletion, StepExample
from activelearn.prm.modeling import NEGATIVE, POSITIVE
from activelearn.simulation.domain import DomainConfig, GeneratedSolution, Problem, continue_solution


@dataclass(frozen=True)
class ShepherdLabels:
    """Per step of one solution, the share of rollouts from its prefix that end right."""

    solution: GeneratedSolution
    shares: tuple[float, ...]

    def hard(self) -> tuple[int, ...]:
        return tuple(1 if share > 0 else -1 for share in self.shares)


def rollout_shares(
    problem: Problem,
    solution: GeneratedSolution,
    rollouts: int,
    config: DomainConfig,
    seed: int = 0,
) -> ShepherdLabels:
    """Complete every prefix of ``solution`` ``rollouts`` times; the share reaching the answer."""
    if rollouts < 1:
        raise ValueError(f"rollouts must be at least 1, got {rollouts}")
    if solution.problem_id != problem.problem_id:
        raise ValueError(f"solution {solution.solution_id!r} is not a solution of problem {problem.problem_id!r}")
    shares: list[float] = []
    for kept in range(1, len(solution.steps) + 1):
        if solution.steps[kept - 1].kind == "answer":
            # The whole solution: its answer is graded, nothing is left to complete.
            shares.append(1.0 if solution.final_correct else 0.0)
            continue
        rng = random.Random(f"shepherd:{seed}:{solution.solution_id}:{kept}")
        right = sum(
            continue_solution(problem, solution, kept, rng, config, f"{solution.solution_id}+{kept}r{r}").final_correct
            for r in range(rollouts)
        )
        shares.append(right / rollouts)
    return ShepherdLabels(solution, tuple(shares))


def hard_labeled_solution(problem_text: str, labels: ShepherdLabels) -> LabeledSolution:
    """Every step rated by hard estimation; the labeler-shaped record ``train_prm`` reads."""
    steps = tuple(
        LabeledStep(completions=(RatedCompletion(text, rating),), chosen=0)
        for text, rating in zip(labels.solution.step_texts, labels.hard(), strict=True)
    )
    return LabeledSolution(problem_id=labels.solution.problem_id, problem=problem_text, steps=steps)


def soft_examples(problem_text: str, labels: ShepherdLabels) -> list[StepExample]:
    """Soft estimation as two weighted copies of the solution: every step positive with
    weight share, and negative with weight 1 - share. The loss is a weighted mean, so the
    two terms add up to the cross-entropy against the soft target."""
    steps = labels.solution.step_texts
    problem_id = labels.solution.problem_id
    return [
        StepExample(problem_id, problem_text, steps, (POSITIVE,) * len(steps), weights=labels.shares),
        StepExample(
            problem_id, problem_text, steps, (NEGATIVE,) * len(steps), weights=tuple(1 - s for s in labels.shares)
        ),
    ]


def label_solutions(
    problems: dict[str, Problem],
    texts: dict[str, str],
    solutions: Sequence[GeneratedSolution],
    rollouts: int,
    config: DomainConfig,
    soft: bool,
    seed: int = 0,
) -> list[LabeledSolution | StepExample]:
    out: list[LabeledSolution | StepExample] = []
    for solution in solutions:
        labels = rollout_shares(problems[solution.problem_id], solution, rollouts, config, seed)
        text = texts[solution.problem_id]
        if soft:
            out.extend(soft_examples(text, labels))
        else:
            out.append(hard_labeled_solution(text, labels))
    return out
