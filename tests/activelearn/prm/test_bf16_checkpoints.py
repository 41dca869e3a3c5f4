"""Backbones stored in bfloat16 (Qwen2.5 and most current checkpoints) still train in float32."""

from pathlib import Path

import torch
from safetensors.torch import load_file

from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.training import TrainConfig, train_prm

from .conftest import keyword_solutions, save_tiny_llama


def _bf16_backbone(directory: Path) -> Path:
    return save_tiny_llama(directory, extra_vocab=8, dtype=torch.bfloat16)


def test_a_bfloat16_backbone_loads_in_float32_unless_a_dtype_is_asked_for(tmp_path):
    directory = _bf16_backbone(tmp_path / "backbone")
    model, _ = ProcessRewardModel.from_backbone(directory)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    model, _ = ProcessRewardModel.from_backbone(directory, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_training_from_a_bfloat16_backbone_moves_its_weights_at_a_1e_5_learning_rate(tmp_path):
    # In bfloat16 weights an AdamW step of about 1e-5 is below half a unit in the last
    # place of a typical 0.02 weight and rounds away: training would leave the backbone as it was.
    directory = _bf16_backbone(tmp_path / "backbone")
    before = load_file(str(directory / "model.safetensors"))
    config = TrainConfig(
        output_dir=tmp_path / "run",
        backbone=str(directory),
        learning_rate=1e-5,
        num_epochs=1,
        batch_size=8,
        max_length=64,
        max_problem_tokens=16,
        warmup_ratio=0.0,
        checkpoint_every=0,
        # A small causal LM trains only its head by default on a CPU; this is about fine-tuning.
        freeze_layers=0,
    )
    result = train_prm(keyword_solutions(16, seed=4), config, validation=[])
    after = load_file(str(result.final_dir / "backbone" / "model.safetensors"))
    layer = "layers.0.mlp.up_proj.weight"
    assert after[layer].dtype == torch.float32
    changed = (after[layer] != before[layer].float()).float().mean().item()
    assert changed > 0.9
