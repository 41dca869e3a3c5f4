import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from activelearn.prm.evaluation import labeled_step_auroc
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.training import TrainConfig, TrainResult, latest_checkpoint, train_prm

from .conftest import keyword_solutions


def _config(output_dir: Path, **overrides: Any) -> TrainConfig:
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


def test_training_learns_a_synthetic_step_task(tmp_path):
    train = keyword_solutions(160, seed=1)
    validation = keyword_solutions(40, seed=2)
    seen = []
    result = train_prm(
        train, _config(tmp_path), validation=validation, progress=lambda step, total, loss: seen.append((step, total))
    )
    losses = [loss for _, loss in result.train_loss_curve]
    assert len(losses) == result.optimizer_steps == 30 and seen[-1] == (30, 30)
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    assert result.val_accuracy is not None and result.val_accuracy > 0.8
    assert result.examples_seen == 3 * 160 and result.labeled_steps_seen == 3 * 160 * 3
    assert json.loads((tmp_path / "result.json").read_text())["optimizer_steps"] == 30

    model, tokenizer = ProcessRewardModel.from_pretrained(result.final_dir)
    report = labeled_step_auroc(model, tokenizer, validation)
    assert report.labeled_steps == 120 and report.auroc > 0.9


def _final_weights(result: TrainResult) -> dict[str, torch.Tensor]:
    return load_file(str(result.final_dir / "head.safetensors"))


def test_an_interrupted_run_resumes_from_its_checkpoint_and_matches_an_uninterrupted_one(tmp_path):
    data = keyword_solutions(48, seed=3)
    overrides = dict(num_epochs=2, batch_size=8, checkpoint_every=2, gradient_accumulation_steps=2, learning_rate=1e-3)
    reference = train_prm(data, _config(tmp_path / "a", **overrides), validation=[])
    assert reference.optimizer_steps == 6

    class Stop(Exception):
        pass

    def stop_at_three(step, total, loss):
        if step == 3:
            raise Stop

    with pytest.raises(Stop):
        train_prm(data, _config(tmp_path / "b", **overrides), validation=[], progress=stop_at_three)
    checkpoint = latest_checkpoint(tmp_path / "b")
    assert checkpoint is not None and checkpoint.name == "checkpoint-00000002"
    assert not (tmp_path / "b" / "final").exists()

    steps_after_resume = []
    resumed = train_prm(
        data,
        _config(tmp_path / "b", **overrides),
        validation=[],
        progress=lambda step, total, loss: steps_after_resume.append(step),
    )
    assert resumed.resumed_from_step == 2 and steps_after_resume == [3, 4, 5, 6]
    assert resumed.examples_seen == reference.examples_seen
    assert [s for s, _ in resumed.train_loss_curve] == [1, 2, 3, 4, 5, 6]
    assert [v for _, v in resumed.train_loss_curve] == pytest.approx([v for _, v in reference.train_loss_curve])
    for name, tensor in _final_weights(reference).items():
        assert torch.allclose(tensor, _final_weights(resumed)[name], atol=1e-6), name
    backbone_a = load_file(str(reference.final_dir / "backbone" / "model.safetensors"))
    backbone_b = load_file(str(resumed.final_dir / "backbone" / "model.safetensors"))
    assert all(torch.allclose(backbone_a[k], backbone_b[k], atol=1e-6) for k in backbone_a)
    # keep_checkpoints=2 prunes older ones; no scratch directories remain.
    names = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert names == ["checkpoint-00000004", "checkpoint-00000006", "final", "result.json"]
