"""LoRA: adapters and the head train, and the saved PRM is an ordinary one that scores the same."""

import pytest
import torch
from safetensors.torch import load_file

from activelearn.prm.adapters import apply_lora, has_adapters, merge_adapters
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.scoring import score_solutions
from activelearn.prm.training import latest_checkpoint, train_prm

from .conftest import keyword_solutions, tiny_config

LORA = dict(backbone="tiny:llama", adapter="lora", lora_rank=4, learning_rate=1e-2, freeze_layers=0)


def _pairs(count: int, seed: int) -> list[tuple[str, tuple[str, ...]]]:
    return [(s.problem, tuple(step.completions[0].text for step in s.steps)) for s in keyword_solutions(count, seed)]


def test_a_prm_with_adapters_scores_the_same_after_merge_save_and_load(tmp_path):
    torch.manual_seed(0)
    model, tokenizer = ProcessRewardModel.from_backbone("tiny:llama", max_length=128, max_problem_tokens=32)
    apply_lora(model, rank=4, alpha=8)
    with torch.no_grad():  # trained-looking adapters: lora_B starts at zero, which would hide a wrong merge
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.5)
    pairs = _pairs(6, seed=2)
    before = score_solutions(model, tokenizer, pairs)

    merge_adapters(model)
    assert not has_adapters(model)
    saved = model.save_pretrained(tmp_path / "prm", tokenizer)
    loaded, loaded_tokenizer = ProcessRewardModel.from_pretrained(saved)
    after = score_solutions(loaded, loaded_tokenizer, pairs)

    for want, got in zip(before, after, strict=True):
        assert got.step_scores == pytest.approx(want.step_scores, abs=1e-5)
    assert len({round(s, 3) for r in before for s in r.step_scores}) > 3  # the scores differ from step to step


@pytest.mark.slow
def test_a_lora_run_trains_adapters_and_head_resumes_from_adapter_only_checkpoints_and_saves_a_plain_prm(tmp_path):
    data = keyword_solutions(32, seed=3)
    overrides = dict(LORA, num_epochs=2, batch_size=8, checkpoint_every=2, gradient_accumulation_steps=2)
    reference = train_prm(data, tiny_config(tmp_path / "a", **overrides), validation=keyword_solutions(8, seed=4))
    assert reference.hyperparameters["adapter"] == "lora" and reference.optimizer_steps == 4

    class Stop(Exception):
        pass

    def stop_at_three(step, total, loss):
        if step == 3:
            raise Stop

    with pytest.raises(Stop):
        train_prm(data, tiny_config(tmp_path / "b", **overrides), validation=[], progress=stop_at_three)
    checkpoint = latest_checkpoint(tmp_path / "b")
    assert checkpoint is not None
    kept = load_file(str(checkpoint / "model.safetensors"))
    # The adapters and the head, not the frozen backbone.
    assert kept and all("lora_" in name or name.startswith("head.") for name in kept)
    assert any(name.startswith("head.") for name in kept)
    resumed = train_prm(data, tiny_config(tmp_path / "b", **overrides), validation=[])
    assert resumed.resumed_from_step == 2
    assert [v for _, v in resumed.train_loss_curve] == pytest.approx([v for _, v in reference.train_loss_curve])

    # The final directory is a plain PRM: no adapter left, backbone weights moved, head trained.
    model, tokenizer = ProcessRewardModel.from_pretrained(reference.final_dir)
    assert not any("lora" in name for name in load_file(str(reference.final_dir / "backbone" / "model.safetensors")))
    torch.manual_seed(1)
    fresh, _ = ProcessRewardModel.from_backbone("tiny:llama", max_length=64, max_problem_tokens=16)
    layer = "layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(model.backbone.state_dict()[layer], fresh.backbone.state_dict()[layer])
    assert dict(model.backbone.named_parameters())["embed_tokens.weight"].shape[0] == len(tokenizer)
    pairs = _pairs(8, seed=4)
    scores = score_solutions(model, tokenizer, pairs)
    assert len(scores) == 8 and reference.calibration is not None
