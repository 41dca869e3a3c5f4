"""The readers benchmark on a few CHAMP problems with a tiny random backbone: every reader's features, a
regression per combination and seed, features kept and reused; bad readers refused by name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import prm_readers

ROOT = Path(__file__).resolve().parents[2]


def _run(cache: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "benchmarks/prm_readers.py", "--backbone", "tiny:bert", "--limit-problems", "40",
               "--cache", str(cache), *options]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_each_combination_is_fitted_per_seed_and_features_are_computed_once(tmp_path):
    cache = tmp_path / "features"
    first = _run(cache, "--readers", "causal,step_text,position", "--combos", "causal,position,causal+step_text",
                 "--seeds", "0", "1")  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in first.stdout.splitlines() if line.startswith("| ")}
    assert set(rows) >= {"causal", "position", "causal+step_text"}
    for combo in ("causal", "position", "causal+step_text"):
        cells = [c.strip() for c in rows[combo].split("|")[1:-1]]
        per_seed = [float(v) for v in cells[6].split(" / ")]  # test step AUROC, per seed
        assert len(cells[7].split(" / ")) == 2  # test F1, per seed
        # F1 at the quantile level chosen on pooled folds: per seed, with the level beside it.
        levels = [re.fullmatch(r"([0-9.]+) \(([0-9.]+)\)", v) for v in cells[9].split(" / ")]
        assert len(levels) == 2 and all(m and 0.0 <= float(m.group(1)) <= 1.0 for m in levels)
        assert len(per_seed) == 2 and all(0.0 <= v <= 1.0 for v in per_seed)
        mean = float(re.match(r"([0-9.]+) \[", cells[3]).group(1))  # test step AUROC, mean [interval]
        assert mean == pytest.approx(sum(per_seed) / 2, abs=1e-3)
    saved = sorted(p.name for p in cache.glob("*.npz"))
    assert len(saved) == 3 and any(name.startswith("step-text-tiny-bert") for name in saved)

    # The same readers again: read from the cache, same numbers.
    again = _run(cache, "--readers", "causal,step_text,position", "--combos", "causal,position,causal+step_text",
                 "--seeds", "0", "1")  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert [line for line in again.stdout.splitlines() if line.startswith("| ")] == [
        line for line in first.stdout.splitlines() if line.startswith("| ")
    ]
    assert sorted(p.name for p in cache.glob("*.npz")) == saved


def test_an_unknown_reader_or_a_combination_of_readers_not_computed_is_refused_by_name(tmp_path):
    run = _run(tmp_path, "--readers", "causal,tea_leaves")
    assert run.returncode == 2 and "--readers: unknown tea_leaves" in run.stderr
    run = _run(tmp_path, "--readers", "causal", "--combos", "causal+position")
    assert run.returncode == 2 and "--combos uses position, not in --readers" in run.stderr
    assert not any(tmp_path.iterdir())


def test_a_solution_trajectory_is_cut_at_its_first_wrong_step():
    steps = prm_readers.Steps(
        problem_ids=["p"] * 5, problems=["x"] * 5, texts=["a", "b", "c", "d", "e"],
        index=np.array([0, 1, 2, 0, 1]), length=np.array([3, 3, 3, 4, 4]),
        fine=np.array([True, True, False, True, True]), solutions=[],
    )  # fmt: skip
    solutions, errors = prm_readers._trajectories(steps, np.arange(5), np.array([0.9, 0.8, 0.1, 0.7, 0.6]))
    assert solutions == [[0.9, 0.8, 0.1], [0.7, 0.6]]
    assert errors == [2, None]


@pytest.fixture
def tiny_lm(tmp_path) -> str:
    """A randomly initialised two-layer causal LM with tied embeddings (what the surprise reads), saved."""
    from transformers import LlamaForCausalLM

    from activelearn.prm.backbones import TINY_LLAMA, backbone_config, load_tokenizer, minilm_directory

    config = backbone_config(TINY_LLAMA)
    assert config is not None
    config.tie_word_embeddings = True
    tokenizer = load_tokenizer(minilm_directory())
    directory = tmp_path / "tiny-lm"
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


@pytest.mark.slow
def test_a_causal_lms_layers_spans_and_surprise_come_from_one_pass(tmp_path, tiny_lm):
    run = _run(tmp_path, "--lm", tiny_lm, "--readers", "lm,lm_layer1,lm_span2,lm_surprise,position",
               "--combos", "lm,lm_layer1+lm_surprise,lm_span2+position", "--seeds", "0")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line.split("|")[1].strip() for line in run.stdout.splitlines() if line.startswith("| ")]
    assert rows[-3:] == ["lm", "lm_layer1+lm_surprise", "lm_span2+position"]
    (saved,) = tmp_path.glob("lm-layers-*tiny-lm-*.npz")
    readings = np.load(saved)
    assert {"lm_layer1", "lm_layer2", "lm_span1", "lm_span2", "lm_surprise"} <= set(readings.files)
    hidden = readings["lm_layer2"].shape[1]
    assert readings["lm_surprise"].shape[1] == 3 and readings["lm_span1"].shape[1] == hidden
    assert f"lm: {hidden + 3} features" in run.stderr  # the last layer and the surprise

    # A layer the LM was not read at is refused, naming the ones it was.
    missing = _run(tmp_path, "--lm", tiny_lm, "--readers", "lm_layer7", "--seeds", "0")
    assert missing.returncode != 0 and f"lm_layer7 is not read from {tiny_lm}" in missing.stderr
    assert "lm_layer1, lm_layer2" in missing.stderr


@pytest.mark.slow
def test_a_cut_lm_reads_its_lower_layers_as_the_whole_lm_does(tmp_path, tiny_lm):
    whole = _run(tmp_path, "--lm", tiny_lm, "--readers", "lm_layer1", "--seeds", "0")
    cut = _run(tmp_path, "--lm", tiny_lm, "--lm-depth", "2", "--readers", "lm_layer1,lm_span1", "--seeds", "0")
    assert whole.returncode == 0 and cut.returncode == 0, whole.stderr[-2000:] + cut.stderr[-2000:]
    (full,) = tmp_path.glob("lm-layers-*tiny-lm-[0-9]*.npz")
    (part,) = tmp_path.glob("lm-layers-*tiny-lm-depth2-*.npz")
    full_readings, cut_readings = np.load(full), np.load(part)
    assert "lm_surprise" not in cut_readings.files and "lm_layer2" not in cut_readings.files
    np.testing.assert_allclose(cut_readings["lm_layer1"], full_readings["lm_layer1"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cut_readings["lm_span1"], full_readings["lm_span1"], rtol=1e-5, atol=1e-5)


def test_a_learning_curve_fits_on_a_share_of_each_seeds_training_problems(tmp_path):
    steps = prm_readers.Steps(
        problem_ids=[f"champ/p{i // 2}" for i in range(200)], problems=["x"] * 200, texts=["a"] * 200,
        index=np.array([0, 1] * 100), length=np.array([2] * 200), fine=np.array([True, False] * 100), solutions=[],
    )  # fmt: skip
    whole = prm_readers.splits(steps, seed=0)
    half = prm_readers.splits(steps, seed=0, share=0.5)
    train = {p for p, s in zip(steps.problem_ids, whole, strict=True) if s == "train"}
    kept = {p for p, s in zip(steps.problem_ids, half, strict=True) if s == "train"}
    # Half of the training problems stay, the rest are set aside; validation and test do not move.
    assert kept < train and len(kept) == round(len(train) / 2)
    assert {s for p, s in zip(steps.problem_ids, half, strict=True) if p in train - kept} == {"unused"}
    assert [s for s in half if s != "unused"] == [s for s, h in zip(whole, half, strict=True) if h != "unused"]
    # A larger share keeps every problem a smaller one kept: a curve's points are nested.
    more = prm_readers.splits(steps, 0, 0.75)
    assert kept < {p for p, s in zip(steps.problem_ids, more, strict=True) if s == "train"}
