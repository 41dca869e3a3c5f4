"""Step features: what the PRM head reads beside the hidden state (the LM's surprise)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm import TrainConfig, train_prm
from activelearn.prm.batching import encode_examples
from activelearn.prm.data import LabeledSolution, build_examples
from activelearn.prm.head_training import separator_features
from activelearn.prm.modeling import CONFIG_FILE, PRMConfig, ProcessRewardModel
from activelearn.prm.recipes import FREEZE_ALL, recipe_for
from activelearn.prm.scoring import score_solutions
from activelearn.simulation.backbone import SIM_BACKBONES, pretrained_backbone
from activelearn.simulation.domain import build_dataset, problem_texts
from activelearn.simulation.oracle import OracleLabeler


@pytest.fixture(scope="module")
def lm_directory(tmp_path_factory):
    """A small causal LM with tied embeddings (the simulated domain's, pretrained briefly)."""
    return pretrained_backbone(SIM_BACKBONES["digits-tiny"], tmp_path_factory.mktemp("backbones")).directory


@pytest.fixture(scope="module")
def solutions():
    dataset = build_dataset(6, 3, seed=4)
    texts = problem_texts(dataset.problems)
    return [(texts[s.problem_id], s.step_texts) for s in dataset.all_solutions()]


def _oracle_labeled(problems: int, per_problem: int, seed: int) -> list[LabeledSolution]:
    dataset = build_dataset(problems, per_problem, seed=seed)
    texts = problem_texts(dataset.problems)
    oracle = OracleLabeler()
    return [oracle.label(texts[s.problem_id], s) for s in dataset.all_solutions()]


def _surprise_prm(directory: Path, max_length: int = 256) -> tuple[ProcessRewardModel, PreTrainedTokenizerBase]:
    torch.manual_seed(0)
    return ProcessRewardModel.from_backbone(str(directory), max_length=max_length, step_features=["surprise"])


def test_each_step_start_is_its_first_token_and_a_cut_step_starts_where_its_window_does(tiny_prm):
    model, tokenizer = tiny_prm
    encoder = model.step_encoder(tokenizer)  # max_length 128, problem head 32
    problem = " ".join(f"word{i}" for i in range(200))
    steps = [f"step {i} " + " ".join(["seven"] * (i % 7 + 3)) for i in range(40)]
    steps[17] = " ".join(["eight"] * 400)  # longer than a whole window
    step_ids = tokenizer(steps, add_special_tokens=False)["input_ids"]
    windows = encoder.encode(problem, steps)
    assert len(windows) > 2
    cut = 0
    for window in windows:
        assert len(window.step_starts) == len(window.separator_positions)
        for start, separator, k in zip(
            window.step_starts, window.separator_positions, window.step_indices, strict=True
        ):
            own = list(window.input_ids[start:separator])
            if own == step_ids[k]:
                continue
            # Cut from the left by the window: the tail of the step, from the window's slice on.
            assert own and step_ids[k][-len(own) :] == own and start == 32, (k, start)
            cut += 1
    assert cut >= 1
    # A solution that fits one window: every step whole, from its first token.
    short = ["first we add", "then we carry the one", "so the answer is 7"]
    (window,) = encoder.encode("What is 3 + 4?", short)
    spans = [list(window.input_ids[a:b]) for a, b in zip(window.step_starts, window.separator_positions, strict=True)]
    assert spans == tokenizer(short, add_special_tokens=False)["input_ids"]


def test_surprise_is_the_language_models_own_negative_log_likelihood_of_each_steps_tokens(lm_directory, solutions):
    model, tokenizer = _surprise_prm(lm_directory)
    model.train(False)
    lm = AutoModelForCausalLM.from_pretrained(str(lm_directory))
    lm.train(False)
    problem, steps = solutions[0]
    window = model.step_encoder(tokenizer).encode(problem, steps)[0]
    ids = torch.tensor([window.input_ids])
    with torch.no_grad():
        log_probs = torch.log_softmax(lm(input_ids=ids).logits[0], dim=-1)
        hidden = model.backbone(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        rows = torch.zeros(len(window.separator_positions), dtype=torch.long)
        vectors = model.head_vectors(
            hidden, ids, rows, torch.tensor(window.separator_positions), torch.tensor(window.step_starts)
        )
    assert vectors.shape == (len(steps), model.prm_config.hidden_size + 3)
    for row, (start, separator) in enumerate(zip(window.step_starts, window.separator_positions, strict=True)):
        # Token t of the step (its separator included) as the LM predicted it from t - 1.
        nll = torch.stack([-log_probs[t - 1, window.input_ids[t]] for t in range(start, separator + 1)])
        expected = torch.stack([nll.max(), nll.mean(), nll.sum()])
        assert torch.allclose(vectors[row, -3:], expected, atol=1e-4), row


def test_with_surprise_a_step_score_depends_only_on_its_prefix_in_any_window(lm_directory, solutions):
    model, tokenizer = _surprise_prm(lm_directory, max_length=64)  # most solutions need several windows
    problem, steps = max(solutions, key=lambda pair: sum(len(s) for s in pair[1]))
    assert len(model.step_encoder(tokenizer).encode(problem, steps)) > 1
    full = score_solutions(model, tokenizer, [(problem, steps)])[0]
    prefixes = score_solutions(model, tokenizer, [(problem, steps[:k]) for k in range(1, len(steps) + 1)], batch_size=3)
    for k, prefix in enumerate(prefixes, start=1):
        assert prefix.step_scores[-1] == pytest.approx(full.step_scores[k - 1], abs=1e-5), f"step {k - 1}"


def test_a_head_trained_on_frozen_features_scores_through_the_same_features(lm_directory, tmp_path):
    labeled = _oracle_labeled(10, 3, seed=5)
    result = train_prm(
        labeled,
        TrainConfig(
            output_dir=tmp_path / "prm",
            backbone=str(lm_directory),
            freeze_layers=1000,
            step_features=("surprise",),
            num_epochs=3,
            checkpoint_every=0,
            cpu=True,
        ),
        validation=[],
    )
    model, tokenizer = ProcessRewardModel.from_pretrained(result.final_dir)
    assert json.loads((result.final_dir / CONFIG_FILE).read_text())["step_features"] == ["surprise"]
    # What the head was fitted on (features computed once) and what scoring feeds it (the
    # forward pass) are the same vectors: the saved head gives the same probabilities.
    sequences = encode_examples(model.step_encoder(tokenizer), build_examples(labeled[:4]))
    features = separator_features(model, sequences, tokenizer.pad_token_id, torch.device("cpu"))
    with torch.no_grad():
        fitted = torch.softmax(model.head(features.vectors), dim=-1)
    scored = score_solutions(
        model, tokenizer, [(s.problem, [step.completions[0].text for step in s.steps]) for s in labeled[:4]]
    )
    flat = torch.tensor([p for s in scored for p in s.step_probabilities])
    assert torch.allclose(fitted, flat, atol=1e-5)


def test_a_simulated_backbones_directory_trains_with_the_simulated_recipe(lm_directory, tmp_path):
    # The campaign passes the cache directory, not the sim: spec; it must get the same recipe.
    resolved = TrainConfig(output_dir=tmp_path, backbone=str(lm_directory), cpu=True).resolved()
    assert recipe_for(str(lm_directory)).family == "simulated" == recipe_for("sim:digits").family
    assert resolved.step_features == ("surprise",) and resolved.freeze_layers == FREEZE_ALL
    # A plain small Llama directory (no pretraining record) stays small_causal: no surprise.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text((lm_directory / "config.json").read_text())
    assert recipe_for(str(plain)).family == "small_causal"
    assert TrainConfig(output_dir=tmp_path, backbone=str(plain), cpu=True).resolved().step_features == ("span",)


@pytest.mark.parametrize("spec", ["tiny:bert", "tiny:llama"])
def test_surprise_is_refused_for_a_backbone_without_a_next_token_head(spec):
    # An encoder never predicted the next token; an untied LM's base model has lost its head.
    with pytest.raises(ValueError, match="step feature 'surprise' needs a causal language model"):
        ProcessRewardModel.from_backbone(spec, step_features=["surprise"])
    with pytest.raises(ValueError, match="unknown step feature 'smell'"):
        ProcessRewardModel.from_backbone(spec, step_features=["smell"])


def test_a_prm_saved_before_step_features_loads_with_none(lm_directory, tmp_path):
    model, tokenizer = ProcessRewardModel.from_backbone(str(lm_directory), max_length=64)
    model.save_pretrained(tmp_path / "old", tokenizer)
    config = json.loads((tmp_path / "old" / CONFIG_FILE).read_text())
    del config["step_features"]
    (tmp_path / "old" / CONFIG_FILE).write_text(json.dumps(config))
    loaded, _ = ProcessRewardModel.from_pretrained(tmp_path / "old")
    assert loaded.prm_config.step_features == [] and loaded.head.in_features == loaded.prm_config.hidden_size
    assert PRMConfig.from_json(json.dumps(config)).head_inputs == config["hidden_size"]


def test_training_on_from_a_saved_prm_keeps_its_features_and_refuses_others(lm_directory, tmp_path, solutions):
    model, tokenizer = _surprise_prm(lm_directory, max_length=64)
    model.save_pretrained(tmp_path / "saved", tokenizer)
    labeled = _oracle_labeled(3, 2, seed=6)
    config = TrainConfig(
        output_dir=tmp_path / "again", backbone=str(tmp_path / "saved"), num_epochs=1, checkpoint_every=0, cpu=True
    )
    again = train_prm(labeled, config, validation=[])
    assert ProcessRewardModel.from_pretrained(again.final_dir)[0].prm_config.step_features == ["surprise"]
    with pytest.raises(ValueError, match=r"step_features \[\] differ from the saved PRM's \['surprise'\]"):
        train_prm(labeled, replace(config, output_dir=tmp_path / "x", step_features=()), validation=[])


def test_span_is_the_mean_of_the_backbones_output_over_each_steps_own_tokens(tiny_prm):
    torch.manual_seed(0)
    model, tokenizer = ProcessRewardModel.from_backbone("tiny:bert", max_length=128, step_features=["span"])
    model.train(False)
    encoder = model.step_encoder(tokenizer)
    (window,) = encoder.encode("What is 3 + 4?", ["first we add", "then we carry the one", "so the answer is 7"])
    input_ids = torch.tensor([window.input_ids])
    rows = torch.zeros(len(window.separator_positions), dtype=torch.long)
    cols = torch.tensor(window.separator_positions)
    starts = torch.tensor(window.step_starts)
    with torch.no_grad():
        hidden = model.backbone(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).last_hidden_state
        vectors = model.head_vectors(hidden, input_ids, rows, cols, starts)

    width = model.prm_config.hidden_size
    assert model.prm_config.head_inputs == vectors.shape[1] == 2 * width
    for n, (start, separator) in enumerate(zip(window.step_starts, window.separator_positions, strict=True)):
        assert torch.allclose(vectors[n, :width], hidden[0, separator])
        assert torch.allclose(vectors[n, width:], hidden[0, start : separator + 1].mean(dim=0), atol=1e-6)


@pytest.mark.parametrize("architecture", ["bert", "llama"])
def test_a_backbone_cut_after_k_layers_reads_what_the_whole_backbone_has_at_layer_k(tmp_path, architecture):
    from tests.activelearn.prm.conftest import save_tiny_llama

    spec = "tiny:bert" if architecture == "bert" else str(save_tiny_llama(tmp_path / "llama", tied=True))
    torch.manual_seed(0)
    whole, tokenizer = ProcessRewardModel.from_backbone(spec, max_length=128)
    torch.manual_seed(0)
    cut, _ = ProcessRewardModel.from_backbone(spec, max_length=128, backbone_layers=1, step_features=["span"])
    whole.train(False)
    cut.train(False)
    ids = torch.tensor([tokenizer("two plus two is four", add_special_tokens=False)["input_ids"]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        at_k = whole.backbone(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[1]
        read = cut.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        # A Llama applies its final norm to what it returns, the cut one too.
        expected = getattr(whole.backbone, "norm")(at_k) if architecture == "llama" else at_k  # noqa: B009
    assert whole.prm_config.backbone_layers is None and cut.prm_config.backbone_layers == 1
    assert torch.allclose(read, expected, atol=1e-5)

    cut.save_pretrained(tmp_path / "saved", tokenizer)
    loaded, _ = ProcessRewardModel.from_pretrained(tmp_path / "saved")
    loaded.train(False)
    assert loaded.backbone.config.num_hidden_layers == 1 and loaded.prm_config.backbone_layers == 1
    with torch.no_grad():
        assert torch.allclose(loaded.backbone(input_ids=ids, attention_mask=mask).last_hidden_state, read, atol=1e-6)


def test_cutting_a_backbone_refuses_what_cannot_be_cut_by_name(tmp_path):
    from tests.activelearn.prm.conftest import save_tiny_llama

    with pytest.raises(ValueError, match="backbone_layers must be between 1 and the backbone's 2 layers, got 5"):
        ProcessRewardModel.from_backbone("tiny:bert", backbone_layers=5)
    spec = str(save_tiny_llama(tmp_path / "llama", tied=True))
    with pytest.raises(ValueError, match="'surprise' needs the whole backbone"):
        ProcessRewardModel.from_backbone(spec, backbone_layers=1, step_features=["surprise"])
    with pytest.raises(ValueError, match="named twice"):
        ProcessRewardModel.from_backbone(spec, step_features=["span", "span"])


def test_the_small_causal_recipe_reads_the_middle_layer_and_the_span_and_a_saved_prm_keeps_its_cut(tmp_path):
    from tests.activelearn.prm.conftest import save_tiny_llama

    spec = str(save_tiny_llama(tmp_path / "llama", tied=True))
    recipe = recipe_for("builtin:smollm2")
    assert recipe.step_features == ("span",) and recipe.backbone_layer_share == 0.5
    assert recipe.aggregation == "mean" and recipe_for("builtin:minilm").aggregation == "choose"
    # The first-error threshold falls along a solution for this recipe only (chosen on CHAMP).
    assert recipe.threshold_decay == 0.15 and recipe_for("builtin:minilm").threshold_decay == 0.0
    # The measured recipe on a GPU too; MiniLM fine-tunes there.
    assert recipe_for("builtin:smollm2", gpu=True) == recipe
    assert recipe_for("builtin:minilm", gpu=True).freeze_layers == 0
    resolved = TrainConfig(output_dir=tmp_path / "out", backbone=spec).resolved()
    assert resolved.backbone_layers == 1 and resolved.step_features == ("span",)  # half of the tiny Llama's 2
    assert resolved.aggregation == "mean" and resolved.threshold_decay == 0.15
    assert (
        replace(TrainConfig(output_dir=tmp_path / "flat", backbone=spec), threshold_decay=0).resolved().threshold_decay
        == 0
    )
    labeled = _oracle_labeled(6, 2, seed=3)
    result = train_prm(labeled, replace(resolved, num_epochs=1), validation=_oracle_labeled(3, 2, seed=5))
    saved = json.loads((Path(result.final_dir) / CONFIG_FILE).read_text())
    assert saved["backbone_layers"] == 1 and saved["step_features"] == ["span"]
    again = TrainConfig(output_dir=tmp_path / "again", backbone=str(result.final_dir)).resolved()
    assert again.backbone_layers is None  # what the saved PRM was cut to stays
    with pytest.raises(ValueError, match="the saved PRM keeps 1 layers"):
        train_prm(labeled, replace(again, backbone_layers=2, num_epochs=1))
