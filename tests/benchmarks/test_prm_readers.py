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


def _synthetic(problems: int = 100, seed: int = 0) -> tuple[prm_readers.Steps, np.ndarray]:
    """Two steps a solution, one solution a problem (fine, then wrong), and a feature that tells them apart noisily."""
    rng = np.random.default_rng(seed)
    fine = np.array([True, False] * problems)
    steps = prm_readers.Steps(
        problem_ids=[f"champ/p{i // 2}" for i in range(2 * problems)], problems=["x"] * 2 * problems,
        texts=["a"] * 2 * problems, index=np.array([0, 1] * problems), length=np.array([2] * 2 * problems),
        fine=fine, solutions=[],
    )  # fmt: skip
    return steps, np.stack([fine + rng.normal(0, 1.0, len(fine)), rng.normal(0, 1, len(fine))], axis=1)


def test_extra_fine_steps_join_only_the_training_problems_and_only_the_first_k_solutions_of_each():
    steps, features = _synthetic()
    split = prm_readers.splits(steps, seed=0)
    train_problems = {p for p, s in zip(steps.problem_ids, split, strict=True) if s == "train"}
    # Three extra solutions of two steps for every problem, ranked 0, 1, 2 within it.
    problem_ids = np.array([f"champ/p{p}" for p in range(100) for _ in range(6)])
    ranks = np.array([r for _ in range(100) for r in (0, 0, 1, 1, 2, 2)])
    extra_features = np.random.default_rng(1).normal(0, 1, (600, 2)) + np.array([1.0, 0.0])
    for per_problem in (1, 2):
        extra = prm_readers.ExtraFine(extra_features, problem_ids, (0.5,), ranks, per_problem)
        result = prm_readers.evaluate(features, steps, split, extra)
        assert result["extra_steps"] == 2 * per_problem * len(train_problems)
        assert result["extra_weight"] in (0.0, 0.5)

    # With no weight to try, the extra steps change nothing: the human labels alone.
    alone = prm_readers.evaluate(features, steps, split)
    unused = prm_readers.evaluate(
        features, steps, split, prm_readers.ExtraFine(extra_features, problem_ids, (), ranks, 3)
    )
    assert unused["extra_weight"] == 0.0
    assert {k: v for k, v in unused.items() if k != "extra_steps"} == {
        k: v for k, v in alone.items() if k != "extra_steps"
    }


def test_balanced_weights_give_each_class_half_of_the_total():
    fine = np.array([True, True, True, False])
    weights = prm_readers._balanced(fine, np.array([1.0, 1.0, 0.5, 1.0]))
    assert weights[fine].sum() == pytest.approx(weights[~fine].sum()) == pytest.approx(1.75)
    assert weights[0] / weights[2] == pytest.approx(2.0)  # within a class, the given weights keep their ratio


def test_solution_ranks_count_each_problems_solutions_in_order():
    from activelearn.prm.data import LabeledSolution, LabeledStep, RatedCompletion

    def solution(problem: str, length: int) -> LabeledSolution:
        return LabeledSolution(problem, "x", tuple(LabeledStep((RatedCompletion("s", 1),), 0) for _ in range(length)))

    steps = prm_readers.Steps([], [], [], np.array([]), np.array([]), np.array([]),
                              [solution("a", 2), solution("b", 1), solution("a", 3)])  # fmt: skip
    assert prm_readers.solution_ranks(steps).tolist() == [0, 0, 0, 1, 1, 1]


def test_pool_positives_need_every_reader_to_be_an_lm_reader(tmp_path):
    run = _run(tmp_path, "--readers", "lm_layer1,position", "--pool-positives", "1")
    assert run.returncode == 2 and "--pool-positives reads the pool with the LM" in run.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_correct_pool_solutions_join_as_fine_steps_in_a_learning_curve_from_one_lm_pass(tmp_path, tiny_lm):
    run = _run(tmp_path, "--lm", tiny_lm, "--readers", "lm_layer1", "--pool-positives", "1", "2",
               "--pool-weights", "0.5", "--seeds", "0")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line.split("|")[1].strip() for line in run.stdout.splitlines() if line.startswith("| ")]
    curve = [re.fullmatch(r"lm_layer1 \+ up to (\d) correct pool solutions a problem \((\d+) fine steps; "
                          r"weight per seed (0|0\.5)\)", row) for row in rows[-2:]]  # fmt: skip
    assert all(curve) and [m.group(1) for m in curve if m] == ["1", "2"]
    added = [int(m.group(2)) for m in curve if m]
    assert 0 < added[0] <= added[1]  # the first solution of each problem is among the first two
    (saved,) = tmp_path.glob("pool-positives-2-*tiny-lm-*.npz")
    assert "lm_layer1" in np.load(saved).files
    assert re.search(r"pool positives: \d+ solutions, \d+ steps", run.stderr)


def _long_clean_solutions(problems: int = 240, seed: int = 0) -> tuple[prm_readers.Steps, np.ndarray]:
    """One solution a problem: a third error-free of 6 steps, the rest wrong at step 1-3; the feature tells a
    wrong step from a fine one, and drifts down along a solution (as a PRM's scores of late steps can)."""
    rng = np.random.default_rng(seed)
    ids, index, length, fine = [], [], [], []
    for p in range(problems):
        first = None if p % 3 == 0 else int(rng.integers(1, 4))
        steps = 6 if first is None else first + 1
        for k in range(steps):
            ids.append(f"champ/p{p}")
            index.append(k)
            length.append(steps)
            fine.append(k != first)
    fine_array, index_array = np.array(fine), np.array(index)
    feature = 2.0 * fine_array - 0.8 * index_array + rng.normal(0, 0.7, len(fine))
    steps_ = prm_readers.Steps(
        problem_ids=ids, problems=["x"] * len(ids), texts=["a"] * len(ids), index=index_array,
        length=np.array(length), fine=fine_array, solutions=[],
    )  # fmt: skip
    return steps_, np.stack([feature, rng.normal(0, 1, len(fine))], axis=1)


def test_a_falling_threshold_is_reported_beside_the_flat_one_by_the_products_rule():
    steps, features = _long_clean_solutions()
    split = prm_readers.splits(steps, seed=0)
    result = prm_readers.evaluate(features, steps, split, decays=(0.0, 0.5))
    # Decay 0 is the product's flat rule: the F1 the report gives beside it.
    assert result["val_f1@0"] == pytest.approx(result["val_f1"])
    assert result["test_f1@0"] == pytest.approx(result["test_f1"])
    # Late steps drift down: a flat threshold flags the long error-free solutions, a falling one spares them.
    assert result["test_f1@0.5"] > result["test_f1@0"] + 0.05
    # The bound beside it: a threshold chosen on the test split itself does at least as well.
    assert all(result[f"hindsight_f1@{d}"] >= result[f"test_f1@{d}"] for d in ("0", "0.5"))
    assert "val_f1@0.5" not in prm_readers.evaluate(features, steps, split)


def test_a_negative_threshold_decay_is_refused(tmp_path):
    run = _run(tmp_path, "--readers", "position", "--threshold-decays", "0", "-0.1")
    assert run.returncode == 2 and "--threshold-decays: each must be a finite number >= 0" in run.stderr
