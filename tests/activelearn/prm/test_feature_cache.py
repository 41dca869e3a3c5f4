"""The feature cache: a frozen backbone's output computed once, read back the same."""

from __future__ import annotations

import pytest
import torch

from activelearn.prm import feature_cache
from activelearn.prm.feature_cache import FeatureCache
from activelearn.prm.freezing import freeze_lower_layers
from activelearn.prm.scoring import score_solutions
from activelearn.prm.training import TrainConfig, train_prm
from tests.activelearn.prm.conftest import keyword_solutions

LONG = [f"step {i} we compute the value then add both sides so it follows" for i in range(40)]


class ForwardCounter:
    """Counts the backbone's forward passes (an observer hook; nothing is replaced)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.calls = 0
        self.handle = module.register_forward_hook(self._seen)

    def _seen(self, *_: object) -> None:
        self.calls += 1


def _pairs() -> list[tuple[str, list[str]]]:
    return [("a problem about sums", LONG), ("another problem", LONG[:3]), ("third", ["one step only"])]


def test_it_scores_through_the_cache_as_without_it_and_reads_the_second_time(tiny_prm, tmp_path):
    model, tokenizer = tiny_prm
    plain = score_solutions(model, tokenizer, _pairs(), reduction="min")
    cache = FeatureCache(tmp_path)
    counter = ForwardCounter(model.backbone)
    first = score_solutions(model, tokenizer, _pairs(), reduction="min", feature_cache=cache)
    computed = counter.calls
    second = score_solutions(model, tokenizer, _pairs(), reduction="min", feature_cache=cache)

    assert computed > 0
    assert counter.calls == computed, "the second scoring ran the backbone again"
    assert len(LONG) == len(first[0].step_scores)
    for expected, got in ((plain, first), (first, second)):
        for a, b in zip(expected, got, strict=True):
            assert a.step_scores == pytest.approx(b.step_scores, abs=1e-5)
    assert cache.hits > 0


def test_it_never_serves_a_changed_backbone_the_old_entries(tiny_prm, tmp_path):
    model, tokenizer = tiny_prm
    cache = FeatureCache(tmp_path)
    before = score_solutions(model, tokenizer, _pairs(), feature_cache=cache)
    with torch.no_grad():
        next(model.backbone.parameters()).mul_(1.5)  # as an optimizer step would
    after_cached = score_solutions(model, tokenizer, _pairs(), feature_cache=cache)
    after_plain = score_solutions(model, tokenizer, _pairs())

    for a, b in zip(after_cached, after_plain, strict=True):
        assert a.step_scores == pytest.approx(b.step_scores, abs=1e-5)
    changed = [
        abs(x - y)
        for a, b in zip(before, after_plain, strict=True)
        for x, y in zip(a.step_scores, b.step_scores, strict=True)
    ]
    assert max(changed) > 1e-4


def test_a_head_only_retraining_reads_its_features_from_the_cache_and_learns_the_same_head(tmp_path):
    train, validation = keyword_solutions(24, seed=1), keyword_solutions(8, seed=2)
    feature_cache.configure(tmp_path / "cache")
    try:
        heads = []
        for run in ("a", "b"):
            config = TrainConfig(
                output_dir=tmp_path / run, backbone="tiny:bert", freeze_layers=99, num_epochs=2, learning_rate=1e-2
            )
            result = train_prm(train, config, validation=validation)
            heads.append(result)
        cache = feature_cache.configured()
        assert cache is not None and cache.hits > 0
    finally:
        feature_cache.configure(None)
    from activelearn.prm.modeling import ProcessRewardModel

    first, _ = ProcessRewardModel.from_pretrained(heads[0].final_dir)
    second, _ = ProcessRewardModel.from_pretrained(heads[1].final_dir)
    assert torch.allclose(first.head.weight, second.head.weight, atol=1e-5)
    assert heads[0].val_auroc == pytest.approx(heads[1].val_auroc, abs=1e-6)


@pytest.mark.parametrize("features", [["surprise"], ["span"]])
def test_a_prm_with_step_features_scores_through_the_cache_per_step(tmp_path, features):
    from activelearn.prm.modeling import ProcessRewardModel
    from tests.activelearn.prm.conftest import save_tiny_llama

    backbone = save_tiny_llama(tmp_path / "llama", tied=True)
    model, tokenizer = ProcessRewardModel.from_backbone(str(backbone), max_length=128, step_features=features)
    freeze_lower_layers(model, 99)
    cache = FeatureCache(tmp_path / "cache")
    plain = score_solutions(model, tokenizer, _pairs())
    counter = ForwardCounter(model.backbone)
    cached = score_solutions(model, tokenizer, _pairs(), feature_cache=cache)
    computed = counter.calls
    again = score_solutions(model, tokenizer, _pairs(), feature_cache=cache)

    assert computed > 0 and counter.calls == computed, "the second scoring ran the backbone again"
    assert cache.hits == sum(len(steps) for _, steps in _pairs())
    for expected, got in ((plain, cached), (plain, again)):
        for a, b in zip(expected, got, strict=True):
            assert a.step_scores == pytest.approx(b.step_scores, abs=1e-5)


def test_a_step_labeled_alone_reads_the_entry_its_solution_scored_whole_left(tmp_path):
    """An ORM's training labels a pool solution's final step only; scoring that pool first
    stored every step, the final one included, so training runs no forward pass."""
    from activelearn.prm.batching import LabeledSequence
    from activelearn.prm.head_training import separator_features
    from activelearn.prm.modeling import ProcessRewardModel

    torch.manual_seed(0)
    model, tokenizer = ProcessRewardModel.from_backbone("tiny:bert", max_length=128, step_features=["span"])
    cache = FeatureCache(tmp_path / "cache")
    score_solutions(model, tokenizer, _pairs(), feature_cache=cache)
    encoder = model.step_encoder(tokenizer)
    window = encoder.encode(*_pairs()[1])[-1]
    final = LabeledSequence(
        input_ids=window.input_ids,
        label_positions=window.separator_positions[-1:],
        label_classes=(2,),
        label_starts=window.step_starts[-1:],
    )
    counter = ForwardCounter(model.backbone)
    read = separator_features(
        model, [final], encoder.pad_id, torch.device("cpu"), separator_id=encoder.separator_id, cache=cache
    )
    plain = separator_features(model, [final], encoder.pad_id, torch.device("cpu"))

    assert counter.calls == 1, "only the uncached reading ran the backbone"
    assert torch.allclose(read.vectors, plain.vectors, atol=1e-5)


def test_a_solution_labeled_at_its_final_step_leaves_every_step_of_its_window_for_scoring(tmp_path):
    """The other way round: an ORM trained on a pool first, the pool scored whole after it."""
    from activelearn.prm.batching import LabeledSequence
    from activelearn.prm.head_training import separator_features
    from activelearn.prm.modeling import ProcessRewardModel

    torch.manual_seed(0)
    model, tokenizer = ProcessRewardModel.from_backbone("tiny:bert", max_length=128, step_features=["span"])
    cache = FeatureCache(tmp_path / "cache")
    encoder = model.step_encoder(tokenizer)
    problem, steps = _pairs()[1]
    (window,) = encoder.encode(problem, steps)
    final = LabeledSequence(
        input_ids=window.input_ids,
        label_positions=window.separator_positions[-1:],
        label_classes=(2,),
        label_starts=window.step_starts[-1:],
        window_positions=window.separator_positions,
        window_starts=window.step_starts,
    )
    read = separator_features(
        model, [final], encoder.pad_id, torch.device("cpu"), separator_id=encoder.separator_id, cache=cache
    )
    counter = ForwardCounter(model.backbone)
    scored = score_solutions(model, tokenizer, [(problem, steps)], feature_cache=cache)
    plain = score_solutions(model, tokenizer, [(problem, steps)])

    assert read.vectors.shape == (1, model.prm_config.head_inputs)
    assert counter.calls == 1, "only the uncached scoring ran the backbone"
    assert scored[0].step_scores == pytest.approx(plain[0].step_scores, abs=1e-5)


@pytest.mark.parametrize("features", [(), ("span",)])
def test_a_miss_pass_runs_in_batches_reports_each_and_leaves_the_model_in_the_mode_it_found(
    tmp_path, features, monkeypatch
):
    """Both cache paths (separators, per step) share one forward loop: batches of MISS_BATCH
    windows, ``on_batch`` after each, no gradient, and a model in training mode stays in it."""
    from activelearn.prm.batching import encode_examples
    from activelearn.prm.data import build_examples
    from activelearn.prm.head_training import separator_features
    from activelearn.prm.modeling import ProcessRewardModel
    from tests.activelearn.prm.conftest import save_tiny_llama

    monkeypatch.setattr(feature_cache, "MISS_BATCH", 2)
    backbone = save_tiny_llama(tmp_path / "llama", tied=True)
    model, tokenizer = ProcessRewardModel.from_backbone(str(backbone), max_length=128, step_features=features)
    freeze_lower_layers(model, 99)
    model.train()
    encoder = model.step_encoder(tokenizer)
    sequences = encode_examples(encoder, build_examples(keyword_solutions(5, seed=3)))
    seen: list[bool] = []
    counter = ForwardCounter(model.backbone)
    found = separator_features(
        model,
        sequences,
        encoder.pad_id,
        torch.device("cpu"),
        on_batch=lambda: seen.append(torch.is_inference_mode_enabled()),
        separator_id=encoder.separator_id,
        cache=FeatureCache(tmp_path / "cache"),
    )

    assert counter.calls == len(seen) == -(-len(sequences) // 2)
    assert all(seen), "the forward pass ran outside inference mode"
    assert model.training and not torch.is_inference_mode_enabled()
    assert len(found.vectors) == sum(len(s.label_classes) for s in sequences)
    assert found.vectors.shape[1] == model.prm_config.head_inputs
