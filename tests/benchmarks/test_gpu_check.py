"""The prepared GPU check runs end to end on the CPU, so it is ready on the day a GPU is lent."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import Qwen2Model

from benchmarks.gpu_check import BF16_TOLERANCE, EOS_ID, PAD_ID, SHAPES, Report

ROOT = Path(__file__).resolve().parents[2]


def _environment_without_django(tmp_path: Path) -> dict[str, str]:
    # The GPU image has no Django: a stand-in that fails on import makes any import of it fatal.
    fake = tmp_path / "no-django" / "django"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no Django on the GPU image')\n")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(fake.parent)
    env["PYTHON"] = sys.executable
    return env


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp_path = tmp_path_factory.mktemp("gpu-check")
    output = tmp_path / "check.json"
    completed = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--device", "cpu", "--output", str(output)],
        cwd=ROOT,
        env=_environment_without_django(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    report: dict[str, Any] = json.loads(output.read_text())
    return report


def test_the_cpu_run_finishes_every_stage_without_django(cpu_report):
    assert cpu_report["finished"] and "aborted" not in cpu_report
    stages = {stage["stage"]: stage["status"] for stage in cpu_report["stages"]}
    assert stages == {
        "environment": "ok",
        "bf16_vs_fp32": "ok",
        "models/tiny/model": "ok",
        "models/tiny/scoring/batch_4": "ok",
        "models/tiny/training/checkpointing": "ok",
        "models/tiny/training/no_checkpointing": "ok",
        "models/tiny/step_generator": "ok",
        "lora/tiny": "ok",
    }
    environment = cpu_report["environment"]
    assert environment["attention"] == "sdpa" and environment["matmul_peak_tflops"] > 0
    assert set(environment["flops"]) == {"params", "scoring", "training", "lora_training", "notes", "mfu"}


def test_bf16_scores_agree_with_float32_within_the_stated_tolerance(cpu_report):
    check = cpu_report["bf16_vs_fp32"]
    assert check["tolerance"] == BF16_TOLERANCE and check["passed"]
    low, high = check["reference_step_score_range"]
    assert low < 0.3 and high > 0.7  # the scores spread, so a disagreement would show
    bf16 = check["bf16_weights"]
    # Above zero: the bf16 model really computed in bf16 rather than silently in float32.
    assert 0 < bf16["max_step_score_diff"] <= BF16_TOLERANCE
    assert bf16["max_solution_score_diff"] <= BF16_TOLERANCE


def test_scoring_reports_throughput_mfu_and_the_pipeline_to_raw_ratio(cpu_report):
    scoring = cpu_report["models"]["tiny"]["scoring"]["batch_4"]
    assert scoring["tokens"] > 0 and scoring["raw_tokens_per_s"] > 0 and scoring["pipeline_tokens_per_s"] > 0
    assert scoring["ratio"] == pytest.approx(scoring["pipeline_tokens_per_s"] / scoring["raw_tokens_per_s"], rel=0.01)
    assert scoring["pipeline_mfu_vs_matmul"] > 0 and scoring["pipeline_mfu"] is None  # no spec peak on a CPU
    assert scoring["weights_dtype"] == "float32" and scoring["attention"] == "sdpa"
    # The FLOP model's N is the parameter count of the model that ran.
    assert scoring["matmul_params"] == cpu_report["models"]["tiny"]["model"]["matmul_params"]


def test_training_runs_with_and_without_checkpointing_on_float32_master_weights(cpu_report):
    training = cpu_report["models"]["tiny"]["training"]
    assert [training[k]["gradient_checkpointing"] for k in ("checkpointing", "no_checkpointing")] == [True, False]
    for run in training.values():
        assert run["master_weights_dtype"] == "float32" and run["losses_finite"]
        assert run["optimizer_steps"] == 2 and run["timed_optimizer_steps"] == 1
        assert run["tokens"] > 0 and run["pipeline_tokens_per_s"] > 0 and run["ratio"] > 0
        assert run["model_tflop"] > 0 and run["pipeline_mfu_vs_matmul"] > 0


def test_lora_training_reports_throughput_and_its_peak_against_the_memory_estimate(cpu_report):
    lora = cpu_report["lora"]["tiny"]
    assert lora["adapter"] == "lora" and lora["losses_finite"] and lora["optimizer_steps"] == 2
    assert 0 < lora["trainable_parameters"] < 0.2 * lora["parameters"]
    assert lora["tokens_per_s"] > 0 and lora["mfu_vs_matmul"] > 0 and lora["mfu"] is None
    # Measured by the CPU allocator; the estimate at the widest batch the run had.
    assert lora["estimate_over_measured"] == pytest.approx(1.0, abs=0.15)
    assert cpu_report["goals"]["lora_training_mfu_7b"] == {"goal": 0.3, "measured": None, "met": None}


def test_the_step_generator_returns_reproducible_candidates(cpu_report):
    generator = cpu_report["models"]["tiny"]["step_generator"]
    assert generator["candidates"] > 0 and generator["device"] == "cpu"
    assert generator["same_seed_same_candidates"] and generator["other_seed_other_candidates"]


def test_the_prm800k_estimate_is_the_sum_of_training_and_scoring(cpu_report):
    estimate = cpu_report["prm800k_estimate"]["h200_at_goal_mfu"]
    assert estimate["total_s"] == pytest.approx(estimate["training_s"] + estimate["scoring_s"], abs=1)
    assert estimate["training_s"] > 0 and estimate["scoring_s"] > 0
    assert "at_measured_rates" not in cpu_report["prm800k_estimate"]  # no 1.5B ran here
    assert cpu_report["goals"]["training_mfu_1.5b"] == {"goal": 0.35, "measured": None, "met": None}


@pytest.mark.parametrize(("name", "published"), [("0.5b", 0.36e9), ("1.5b", 1.31e9), ("7b", 6.53e9)])
def test_the_flop_model_counts_qwen2_5_non_embedding_parameters_as_published(name, published):
    assert SHAPES[name].matmul_params() == pytest.approx(published, rel=0.01)


def test_the_flop_model_counts_the_parameters_of_an_instantiated_qwen2():
    shape = SHAPES["small"]
    model = Qwen2Model(shape.config(pad_id=PAD_ID, eos_id=EOS_ID))
    counted = sum(p.numel() for p in model.parameters()) - model.embed_tokens.weight.numel()
    assert shape.matmul_params() == counted + 3 * shape.hidden + 3  # plus the PRM head


def test_a_failing_stage_is_recorded_and_the_next_one_still_runs(tmp_path):
    report = Report(tmp_path / "r.json", budget_s=60, grace_s=60)

    def out_of_memory():
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    report.stage(["models", "big", "training"], 0, out_of_memory)
    report.stage(["models", "small", "training"], 0, lambda: {"tokens": 3})
    report.finish()
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["models"]["big"]["training"]["error"]["error"].startswith("OutOfMemoryError: CUDA out of memory")
    assert written["models"]["small"]["training"] == {"tokens": 3}
    assert [s["status"] for s in written["stages"]] == ["error", "ok"] and report.failed


def test_a_stage_that_no_longer_fits_the_budget_is_skipped(tmp_path):
    report = Report(tmp_path / "r.json", budget_s=30, grace_s=60)
    ran = []
    report.stage(["training"], 45, lambda: ran.append(1))
    report.finish()
    written = json.loads((tmp_path / "r.json").read_text())
    assert ran == [] and "training" not in written
    assert written["stages"][0]["status"] == "skipped" and "budget" in written["stages"][0]["note"]


def test_the_watchdog_writes_what_was_measured_and_exits_when_a_stage_overruns(tmp_path, monkeypatch):
    exits: list[int] = []
    # Process exit is the edge: recorded here instead of ending the test run.
    monkeypatch.setattr(os, "_exit", exits.append)
    report = Report(tmp_path / "r.json", budget_s=1, grace_s=0.5)
    report.put(["environment"], {"device": "cpu"})
    began = time.monotonic()
    report.stage(["hangs"], 0, lambda: time.sleep(4))
    written = json.loads((tmp_path / "r.json").read_text())
    assert exits == [3] and written["environment"] == {"device": "cpu"}
    assert written["aborted"]["stage"] == "hangs" and written["aborted"]["after_s"] < time.monotonic() - began
