"""The memory estimate against the allocator's measured peak, and the choice it makes."""

import json

import pytest
import torch
from transformers import Qwen2Config

from activelearn.prm.backbones import backbone_config
from activelearn.prm.batching import encode_examples
from activelearn.prm.data import build_examples
from activelearn.prm.memory import (
    GIB,
    DeviceMemory,
    TrainingMemoryError,
    choose_adapter,
    cpu_peak_bytes,
    estimate_memory,
)
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.training import train_prm

from .conftest import keyword_solutions, tiny_config

BATCH, LENGTH = 16, 128
# Long solutions: every sequence is cut into windows close to LENGTH tokens.
LONG = dict(count=32, seed=3, steps=30)

# Qwen2.5-7B as published (Qwen2.5-Math-PRM-7B's backbone).
QWEN_7B = dict(
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    vocab_size=152064,
    max_position_embeddings=4096,
)


def _widest_sequence(spec: str) -> int:
    model, tokenizer = ProcessRewardModel.from_backbone(spec, max_length=LENGTH, max_problem_tokens=16)
    sequences = encode_examples(model.step_encoder(tokenizer), build_examples(keyword_solutions(**LONG)))
    return max(len(sequence.input_ids) for sequence in sequences)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "adapter", "checkpointing", "accumulation"),
    [
        ("tiny:llama", "full", False, 1),
        ("tiny:llama", "lora", True, 1),
        ("tiny:bert", "full", True, 2),
        ("tiny:bert", "lora", False, 1),
    ],
)
def test_the_estimate_is_within_15_percent_of_the_peak_the_cpu_allocator_measures(
    tmp_path, spec, adapter, checkpointing, accumulation
):
    torch.set_num_threads(1)
    config = tiny_config(
        tmp_path / "run",
        backbone=spec,
        adapter=adapter,
        batch_size=BATCH,
        max_length=LENGTH,
        gradient_checkpointing=checkpointing,
        gradient_accumulation_steps=accumulation,
        freeze_layers=0,
        lora_rank=8,
        num_epochs=1,
        max_steps=2,
    )
    measured = cpu_peak_bytes(lambda: train_prm(keyword_solutions(**LONG), config, validation=[]))
    # At the width the batches really have: the windows stop short of max_length at a step
    # boundary, and the estimate is of the memory model, not of that slack.
    estimate = estimate_memory(
        backbone_config(spec),
        adapter=adapter,
        batch_size=BATCH,
        max_length=_widest_sequence(spec),
        gradient_checkpointing=checkpointing,
        gradient_accumulation_steps=accumulation,
        bf16=False,
        cuda=False,
        lora_rank=8,
    )
    assert estimate.activations > 0.3 * estimate.peak  # activations matter at this shape
    assert estimate.peak == pytest.approx(measured, rel=0.15), (estimate.describe(), measured)
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["memory"]["adapter"] == adapter and result["hyperparameters"]["adapter"] == adapter


def test_a_configuration_that_fits_nowhere_is_refused_with_the_numbers_before_anything_loads(tmp_path):
    backbone = tmp_path / "qwen-7b-shape"
    # A config alone: no weights, so the refusal cannot have loaded any.
    Qwen2Config(**{**QWEN_7B, "max_position_embeddings": 32768}).save_pretrained(str(backbone))
    config = tiny_config(
        tmp_path / "run", backbone=str(backbone), batch_size=64, max_length=32768, freeze_layers=0, cpu=True
    )

    with pytest.raises(TrainingMemoryError) as refused:
        train_prm(keyword_solutions(4, seed=1), config, validation=[])

    message = str(refused.value)
    assert "does not fit host memory" in message
    assert "full fine-tune:" in message and "LoRA:" in message and message.count("GiB") >= 8
    assert "batch 64 x 32768 tokens" in message and "gradient_checkpointing" in message
    assert not (tmp_path / "run").exists()


def _plan_7b(memory_gib: float, processes: int = 1):
    return choose_adapter(
        "auto",
        Qwen2Config(**QWEN_7B),
        DeviceMemory(name="GPU", total=int(memory_gib * GIB), usable=int(0.9 * memory_gib * GIB)),
        batch_size=8,
        max_length=2048,
        gradient_accumulation_steps=4,
        gradient_checkpointing=True,
        bf16=True,
        cuda=True,
        processes=processes,
        freeze_layers=0,
        lora_rank=16,
        lora_alpha=32,
    )


def test_a_7b_backbone_trains_with_lora_on_one_80_gb_gpu_and_in_full_sharded_over_eight():
    one = _plan_7b(80)
    assert one.adapter == "lora" and "exceeds" in one.reason
    assert one.full is not None and one.full.peak > 100 * GIB  # 16 bytes x 7.6B parameters and more
    assert one.lora is not None and one.lora.peak < 72 * GIB
    assert one.lora.trainable_parameters < 0.01 * one.lora.parameters

    eight = _plan_7b(80, processes=8)
    assert eight.adapter == "full" and eight.full is not None and eight.full.sharded
    assert eight.full.weights == pytest.approx(one.full.weights / 8, rel=0.01)


def test_an_explicit_adapter_is_kept_whatever_the_estimate_says():
    plan = choose_adapter(
        "full",
        Qwen2Config(**QWEN_7B),
        DeviceMemory(name="GPU", total=80 * GIB, usable=72 * GIB),
        batch_size=8,
        max_length=2048,
        gradient_accumulation_steps=1,
        gradient_checkpointing=True,
        bf16=True,
        cuda=True,
        processes=1,
        freeze_layers=0,
        lora_rank=16,
        lora_alpha=32,
    )
    assert plan.adapter == "full" and plan.full is not None and plan.full.peak > 72 * GIB
