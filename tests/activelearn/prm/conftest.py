"""Fixtures for the PRM tests: tiny randomly initialised backbones, no downloads."""

from __future__ import annotations

import random

import pytest
import torch
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.data import LabeledSolution, LabeledStep, RatedCompletion
from activelearn.prm.modeling import ProcessRewardModel

FILLER = ["we", "now", "compute", "the", "value", "then", "add", "both", "sides", "so", "it", "follows"]


@pytest.fixture
def tiny_prm() -> tuple[ProcessRewardModel, PreTrainedTokenizerBase]:
    torch.manual_seed(0)
    return ProcessRewardModel.from_backbone("tiny:bert", max_length=128, max_problem_tokens=32)


def keyword_solutions(count: int, seed: int, steps: int = 3) -> list[LabeledSolution]:
    """Each step is filler words ending in "correct" (+1) or "wrong" (-1).

    Earlier steps carry the other keyword too, so the model must read the step being
    scored rather than anything before it.
    """
    rng = random.Random(seed)
    solutions = []
    for index in range(count):
        labeled = []
        for _ in range(steps):
            good = rng.random() < 0.5
            words = [*rng.sample(FILLER, 4), "correct" if good else "wrong"]
            labeled.append(LabeledStep(completions=(RatedCompletion(" ".join(words), 1 if good else -1),), chosen=0))
        solutions.append(
            LabeledSolution(problem_id=f"p{seed}-{index}", problem=f"problem number {index}", steps=tuple(labeled))
        )
    return solutions
