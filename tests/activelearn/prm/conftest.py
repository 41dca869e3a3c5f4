"""Fixtures for the PRM tests: tiny randomly initialised backbones, no downloads."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.backbones import load_tokenizer, minilm_directory
from activelearn.prm.data import LabeledSolution, LabeledStep, RatedCompletion
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.training import TrainConfig

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


def save_tiny_llama(
    directory: Path, *, tied: bool = False, extra_vocab: int = 0, dtype: torch.dtype = torch.float32
) -> Path:
    """A tiny randomly initialised Llama base model (hidden 32, 2 layers) and the MiniLM
    tokenizer saved in ``directory``, a local backbone directory; ``tied``: its LM head is
    its input embeddings (what the surprise feature and LM adaptation need)."""
    tokenizer = load_tokenizer(minilm_directory())
    config = LlamaConfig(
        vocab_size=len(tokenizer) + extra_vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=tied,
        use_cache=False,
    )
    torch.manual_seed(0)
    LlamaModel(config).to(dtype).save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    return directory


def tiny_config(output_dir: Path, **overrides: Any) -> TrainConfig:
    """A few-second training run of a tiny random BERT, no intermediate checkpoints."""
    values: dict[str, Any] = dict(
        output_dir=output_dir,
        backbone="tiny:bert",
        learning_rate=1e-2,
        num_epochs=3,
        batch_size=16,
        max_length=64,
        max_problem_tokens=16,
        warmup_ratio=0.0,
        checkpoint_every=0,
        seed=1,
    )
    values.update(overrides)
    return TrainConfig(**values)
