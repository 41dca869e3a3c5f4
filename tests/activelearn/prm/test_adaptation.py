"""Continued LM training of a backbone on unlabeled solutions (activelearn.prm.adaptation)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaForCausalLM, LlamaModel

from activelearn.prm.adaptation import ADAPTATION_FILE, AdaptConfig, adapt_backbone, lm_loss
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.recipes import backbone_family
from activelearn.prm.tokenization import DEFAULT_SEPARATOR

from .conftest import save_tiny_llama


def tied_llama(directory: Path) -> Path:
    """A tiny randomly initialised causal LM whose LM head is its input embeddings."""
    return save_tiny_llama(directory, tied=True)


def arithmetic(count: int, seed: int) -> list[tuple[str, list[str]]]:
    """Solutions in a tiny domain whose next token is mostly predictable."""
    rng = random.Random(seed)
    solutions = []
    for index in range(count):
        a, b = rng.randint(1, 4), rng.randint(1, 4)
        steps = [f"we add {a} and {b}", f"so the sum is {a + b}", "the answer follows"]
        solutions.append((f"problem {index}: add {a} and {b}", steps))
    return solutions


def test_lm_loss_is_the_causal_lm_loss_of_the_same_weights(tmp_path):
    directory = tied_llama(tmp_path / "lm")
    base = LlamaModel.from_pretrained(str(directory))
    full = LlamaForCausalLM.from_pretrained(str(directory))
    ids = torch.tensor([[5, 9, 2000, 3000, 17, 8], [7, 1999, 40, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    total, count = lm_loss(base, ids, mask)
    expected = full(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
    assert count == 5 + 2
    assert torch.allclose(total / count, expected, atol=1e-5)


def test_adaptation_lowers_the_held_out_loss_and_writes_a_backbone_train_prm_reads(tmp_path):
    directory = tied_llama(tmp_path / "lm")
    before = load_file(str(directory / "model.safetensors"))
    out = tmp_path / "adapted"
    config = AdaptConfig(max_steps=80, batch_size=8, learning_rate=1e-2, warmup_steps=2, train_layers=1,
                         max_length=128, heldout_share=0.25)  # fmt: skip
    report = adapt_backbone(str(directory), arithmetic(60, seed=1), out, config)

    assert report.heldout_windows > 0 and report.train_windows > report.heldout_windows
    assert report.heldout_loss_before is not None and report.heldout_loss_after is not None
    assert report.heldout_loss_after < report.heldout_loss_before - 0.5
    record = json.loads((out / ADAPTATION_FILE).read_text())
    assert record["heldout_loss_after"] == report.heldout_loss_after
    assert record["config"]["max_steps"] == 80 and len(record["loss_curve"]) == 80

    after = load_file(str(out / "model.safetensors"))
    # Only the top block (and the final norm) trained; the embeddings, which are the LM
    # head, and the lower block kept their weights (the separator row is new).
    assert torch.equal(
        after["embed_tokens.weight"][: len(before["embed_tokens.weight"])], before["embed_tokens.weight"]
    )
    assert all(torch.equal(after[k], before[k]) for k in before if k.startswith("layers.0."))
    assert any(not torch.equal(after[k], before[k]) for k in before if k.startswith("layers.1."))

    # The directory is an ordinary backbone: its separator (and that embedding) is kept,
    # and the LM's surprise can be read from it as a step feature.
    prm, tokenizer = ProcessRewardModel.from_backbone(str(out), step_features=["surprise"])
    sep = tokenizer.convert_tokens_to_ids(DEFAULT_SEPARATOR)
    embeddings = prm.backbone.get_input_embeddings()
    assert isinstance(embeddings, torch.nn.Embedding)
    assert torch.equal(embeddings.weight[sep], after["embed_tokens.weight"][sep])
    assert backbone_family(str(out)) == "small_causal"


def test_adaptation_refuses_what_it_cannot_train_and_writes_nothing(tmp_path):
    out = tmp_path / "adapted"
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        adapt_backbone("tiny:bert", arithmetic(4, seed=0), out, AdaptConfig(max_steps=1))
    with pytest.raises(ValueError, match="no solutions"):
        adapt_backbone("tiny:bert", [], out, AdaptConfig(max_steps=1))
    with pytest.raises(ValueError, match="held-out share"):
        adapt_backbone(str(tied_llama(tmp_path / "lm")), arithmetic(1, 0), out, AdaptConfig(heldout_share=0.99))
    assert not out.exists()
