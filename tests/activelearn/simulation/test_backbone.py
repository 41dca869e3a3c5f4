import json
import math
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from activelearn.prm import ProcessRewardModel, TrainConfig, train_prm
from activelearn.prm.backbones import load_tokenizer
from activelearn.prm.recipes import FREEZE_ALL, PRETRAIN_FILE
from activelearn.prm.tokenization import DEFAULT_SEPARATOR
from activelearn.simulation import backbone as sim_backbone
from activelearn.simulation.backbone import (
    SIM_BACKBONES,
    STEP_SEPARATOR,
    build_tokenizer,
    encode_solution,
    pretrained_backbone,
)
from activelearn.simulation.domain import build_dataset, problem_texts
from activelearn.simulation.oracle import OracleLabeler

TINY = SIM_BACKBONES["digits-tiny"]


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("var")


@pytest.fixture(scope="module")
def tiny_backbone(var_dir):
    # Where the product looks for sim: backbones when ANNOTATE_VAR_DIR is var_dir.
    return pretrained_backbone(TINY, var_dir / "simulation" / "backbones")


def test_every_digit_is_a_token_of_its_own_and_numbers_keep_their_digits():
    tokenizer = build_tokenizer(["A shop has 12 boxes of 7 pens each.", "So 12 * 7 = 84 pens."])
    tokens = tokenizer.tokenize("Selling 118 leaves 391 - 118 = 273 pens.")
    assert tokens[1:4] == ["1", "1", "8"]
    digits = "".join(token for token in tokens if token.isdigit())
    assert digits == "118391118273"
    # Numbers never seen in the corpus still encode exactly: only unknown words become [UNK].
    ids = tokenizer("9056 Zebra", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == ["9", "0", "5", "6", "[UNK]"]


def test_the_saved_tokenizer_loads_through_the_product_loader_and_knows_the_step_separator(tiny_backbone):
    tokenizer = load_tokenizer(tiny_backbone.directory)
    assert STEP_SEPARATOR == DEFAULT_SEPARATOR
    separator = tokenizer.convert_tokens_to_ids(DEFAULT_SEPARATOR)
    assert separator != tokenizer.unk_token_id
    ids = encode_solution(tokenizer, "Omar has 3 bags.", ["So 3 * 4 = 12 marbles.", "# Answer\n\n12"])
    assert ids.count(separator) == 2 and ids[-1] == separator
    assert tokenizer.unk_token_id not in ids


def test_the_pretrained_backbone_is_cached_and_a_changed_config_pretrains_again(tmp_path, monkeypatch):
    first = pretrained_backbone(TINY, tmp_path)
    assert first.trained and (first.directory / PRETRAIN_FILE).is_file()
    recorded = json.loads((first.directory / PRETRAIN_FILE).read_text())
    assert recorded["fingerprint"] == TINY.fingerprint() and recorded["final_loss"] > 0

    def no_training(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(sim_backbone, "_pretrain", no_training)
    again = pretrained_backbone(TINY, tmp_path)
    assert again.directory == first.directory and not again.trained

    changed = replace(TINY, max_steps=TINY.max_steps + 1)
    with pytest.raises(AssertionError, match="cache"):
        pretrained_backbone(changed, tmp_path)
    assert changed.fingerprint() != TINY.fingerprint()


def test_a_sim_backbone_trains_as_a_prm_through_train_prm_keeping_its_pretrained_separator(
    tiny_backbone, var_dir, tmp_path, monkeypatch
):
    # The spec resolves against the cache under ANNOTATE_VAR_DIR, which already holds it.
    monkeypatch.setenv("ANNOTATE_VAR_DIR", str(var_dir))
    monkeypatch.setattr(sim_backbone, "_pretrain", lambda *a, **k: pytest.fail("should come from the cache"))
    model, tokenizer = ProcessRewardModel.from_backbone("sim:digits-tiny", max_length=256)
    pretrained = AutoModelForCausalLM.from_pretrained(str(tiny_backbone.directory))
    separator = tokenizer.convert_tokens_to_ids(DEFAULT_SEPARATOR)
    pretrained_rows = pretrained.get_parameter("model.embed_tokens.weight")
    loaded_rows = model.backbone.get_parameter("embed_tokens.weight")
    assert torch.equal(loaded_rows[separator], pretrained_rows[separator])

    dataset = build_dataset(12, 3, seed=0)
    texts = problem_texts(dataset.problems)
    oracle = OracleLabeler()
    labeled = [oracle.label(texts[s.problem_id], s) for s in dataset.all_solutions()]
    # The simulated recipe: the LM stays as pretrained and the head reads its surprise.
    result = train_prm(
        labeled,
        TrainConfig(
            output_dir=tmp_path / "prm", backbone="sim:digits-tiny", batch_size=8, checkpoint_every=0, cpu=True
        ),
        validation=[],
    )
    assert result.hyperparameters["freeze_layers"] == FREEZE_ALL
    assert result.hyperparameters["step_features"] == ("surprise",)
    trained, _ = ProcessRewardModel.from_pretrained(result.final_dir)
    assert trained.prm_config.step_features == ["surprise"]
    assert trained.head.in_features == TINY.hidden_size + 3
    before = pretrained.get_submodule("model.layers.0.mlp.up_proj").weight
    assert torch.equal(before, trained.backbone.get_submodule("layers.0.mlp.up_proj").weight)

    # Fine-tuning the whole model stays an option, surprise and all: gradients flow
    # through the LM's own predictions into its weights.
    tuned = train_prm(
        labeled,
        TrainConfig(
            output_dir=tmp_path / "tuned",
            backbone="sim:digits-tiny",
            num_epochs=1,
            batch_size=8,
            freeze_layers=0,
            checkpoint_every=0,
            cpu=True,
        ),
        validation=[],
    )
    assert tuned.optimizer_steps >= 4 and all(math.isfinite(loss) for _, loss in tuned.train_loss_curve)
    moved, _ = ProcessRewardModel.from_pretrained(tuned.final_dir)
    after = moved.backbone.get_submodule("layers.0.mlp.up_proj").weight
    assert not torch.allclose(before, after), "fine-tuning should move the pretrained weights"
