import dataclasses
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from activelearn.prm.batching import LabeledSequence
from activelearn.prm.data import LabeledSolution
from activelearn.prm.evaluation import labeled_step_auroc
from activelearn.prm.freezing import freeze_lower_layers
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.recipes import recipe_for
from activelearn.prm.training import (
    EpochReport,
    TrainConfig,
    TrainResult,
    class_weights,
    latest_checkpoint,
    train_prm,
)

from .conftest import keyword_solutions, tiny_config


def test_training_learns_a_synthetic_step_task(tmp_path):
    train = keyword_solutions(160, seed=1)
    validation = keyword_solutions(40, seed=2)
    seen = []
    result = train_prm(
        train,
        tiny_config(tmp_path),
        validation=validation,
        progress=lambda step, total, loss: seen.append((step, total)),
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
    reference = train_prm(data, tiny_config(tmp_path / "a", **overrides), validation=[])
    assert reference.optimizer_steps == 6

    class Stop(Exception):
        pass

    def stop_at_three(step, total, loss):
        if step == 3:
            raise Stop

    with pytest.raises(Stop):
        train_prm(data, tiny_config(tmp_path / "b", **overrides), validation=[], progress=stop_at_three)
    checkpoint = latest_checkpoint(tmp_path / "b")
    assert checkpoint is not None and checkpoint.name == "checkpoint-00000002"
    assert not (tmp_path / "b" / "final").exists()

    steps_after_resume = []
    resumed = train_prm(
        data,
        tiny_config(tmp_path / "b", **overrides),
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


def _with_whole_solutions(solutions: list[LabeledSolution]) -> list[LabeledSolution]:
    return [replace(s, solution_steps=tuple(step.completions[0].text for step in s.steps)) for s in solutions]


def test_every_epoch_reports_auroc_and_the_majority_baseline_and_validation_picks_threshold_and_aggregation(
    tmp_path,
):
    # 99 training sequences in batches of 16 and 24 validation ones in batches of 16: both
    # loaders end on a short batch (3 and 8), and validation runs at the end of a training epoch.
    train = keyword_solutions(99, seed=4)
    validation = _with_whole_solutions(keyword_solutions(24, seed=5))
    reports: list[EpochReport] = []
    config = tiny_config(tmp_path, num_epochs=2, eval_batch_size=16)
    result = train_prm(train, config, validation=validation, on_epoch=reports.append)
    assert [r.epoch for r in reports] == [1, 2] and reports[-1].step == result.optimizer_steps
    labels = [step.completions[0].rating for s in validation for step in s.steps]
    share = max(labels.count(1), labels.count(-1)) / len(labels)
    assert all(r.val_majority_accuracy == pytest.approx(share) for r in reports)
    # Every labeled validation step counts, also when the last batch is a short one.
    assert all(r.val_labeled_steps == len(labels) for r in reports)
    assert reports[-1].val_auroc is not None and reports[-1].val_auroc > 0.9
    assert result.epochs == [dataclasses.asdict(r) for r in reports]
    assert result.calibration is not None
    assert 0.0 < result.calibration["threshold"] < 1.0
    assert result.calibration["aggregation"] in {"min", "product", "mean", "last"}
    assert result.calibration["aggregation_solutions"] == 24


def test_balanced_class_weights_count_each_class_equally():
    sequences = [LabeledSequence((1, 2, 3), (1, 2), (2, 2), (1, 2)), LabeledSequence((1, 2), (1,), (0,), (1,))]
    weights = class_weights(sequences, 3)
    # 3 labels: two positive (weight 3 / (2 x 2)), one negative (3 / (2 x 1)), no neutral.
    assert weights.tolist() == pytest.approx([1.5, 0.0, 0.75])


def test_a_frozen_backbone_trains_only_the_head_on_features_computed_once(tmp_path):
    train = keyword_solutions(160, seed=6)
    validation = keyword_solutions(40, seed=7)
    result = train_prm(
        train,
        tiny_config(tmp_path, freeze_layers=99, num_epochs=20, learning_rate=1e-2, seed=0),
        validation=validation,
    )
    assert result.optimizer_steps == 20 * 30  # 480 labeled steps in batches of 16
    # Random 2-layer features carry little of the keyword, but the head finds some of it.
    assert len(result.epochs) == 20 and result.val_auroc is not None and result.val_auroc > 0.55
    model, tokenizer = ProcessRewardModel.from_pretrained(result.final_dir)
    # The backbone is saved unchanged (same seed, same random init); only the head moved.
    torch.manual_seed(0)
    fresh, _ = ProcessRewardModel.from_backbone("tiny:bert", max_length=64, max_problem_tokens=16)
    for name, tensor in fresh.backbone.state_dict().items():
        assert torch.equal(tensor, model.backbone.state_dict()[name]), name
    assert not torch.equal(fresh.head.weight, model.head.weight)
    # The head reads raw hidden states: scoring the saved model reproduces the validation AUROC.
    assert labeled_step_auroc(model, tokenizer, validation).auroc == pytest.approx(result.val_auroc, abs=1e-4)


def test_a_penalised_head_is_fitted_at_each_strength_and_the_best_on_validation_is_kept(tmp_path):
    train = keyword_solutions(160, seed=6)
    validation = keyword_solutions(40, seed=7)
    strengths = (0.001, 0.1, 1000.0)
    config = tiny_config(tmp_path / "a", freeze_layers=99, seed=0, head_l2=strengths)
    result = train_prm(train, config, validation=validation)
    (report,) = result.epochs
    tried = report["head_l2_val_aurocs"]
    assert set(tried) == {"0.001", "0.1", "1000.0"}
    # The one kept has the best validation step AUROC, and it is what the saved model scores.
    assert report["head_l2"] in strengths and tried[str(report["head_l2"])] == max(tried.values())
    model, tokenizer = ProcessRewardModel.from_pretrained(result.final_dir)
    assert labeled_step_auroc(model, tokenizer, validation).auroc == pytest.approx(result.val_auroc, abs=1e-4)
    assert result.val_auroc is not None and result.val_auroc > 0.55
    assert result.val_auroc == pytest.approx(max(tried.values()), abs=1e-6)
    # A strength that leaves the head nearly nothing to say ranks worse than a mild one.
    assert tried["1000.0"] < max(tried["0.001"], tried["0.1"])


def test_lower_layers_can_be_frozen(tmp_path):
    model, _ = ProcessRewardModel.from_backbone("tiny:bert", max_length=64, max_problem_tokens=16)
    assert freeze_lower_layers(model, 1) == 1
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert not any(name.startswith("backbone.embeddings") for name in trainable)
    assert not any(".layer.0." in name for name in trainable)
    assert any(".layer.1." in name for name in trainable) and "head.weight" in trainable


@pytest.mark.parametrize(
    ("spec", "family"),
    [("builtin:minilm", "small_encoder"), ("builtin:smollm2", "small_causal"), ("tiny:llama", "tiny")],
)
def test_each_backbone_family_has_its_own_defaults(spec, family):
    recipe = recipe_for(spec)
    assert recipe.family == family
    resolved = TrainConfig(output_dir=Path("x"), backbone=spec, cpu=True).resolved()
    assert (resolved.learning_rate, resolved.num_epochs, resolved.max_length, resolved.freeze_layers) == (
        recipe.learning_rate,
        recipe.num_epochs,
        recipe.max_length,
        recipe.freeze_layers,
    )
    assert TrainConfig(output_dir=Path("x"), backbone=spec, learning_rate=3e-3).resolved().learning_rate == 3e-3


def test_a_local_directory_is_classified_from_its_config(tmp_path):
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "config.json").write_text(json.dumps({"model_type": "roberta", "hidden_size": 768}))
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 1536}))
    assert recipe_for(str(tmp_path / "enc")).family == "small_encoder"
    assert recipe_for(str(tmp_path / "big")).family == "large_causal"
    assert recipe_for(str(tmp_path / "big")).learning_rate == 1e-5
