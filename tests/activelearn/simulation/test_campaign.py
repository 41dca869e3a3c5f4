import math
from dataclasses import replace
from typing import Any

import pytest

from activelearn.simulation.campaign import (
    STRATEGIES,
    CampaignConfig,
    Comparison,
    _run_seed,
    compare_strategies,
    pool_solutions,
    run_campaign,
)
from activelearn.simulation.domain import generate_problems
from activelearn.simulation.report import comparison_markdown, write_report
from activelearn.simulation.stats import bootstrap_efficiency, data_efficiency, labels_to_reach, mean_interval

TINY: dict[str, Any] = dict(
    train_problems=16,
    solutions_per_problem=4,
    eval_problems=6,
    eval_solutions_per_problem=4,
    best_of_n_sizes=(2, 4),
    num_epochs=1,
    max_length=128,
)


def test_labels_to_reach_interpolates_between_generations():
    curve = [(100.0, 0.2), (200.0, 0.4), (300.0, 0.5)]
    assert labels_to_reach(curve, 0.3) == pytest.approx(150.0)
    assert labels_to_reach(curve, 0.1) == 100.0
    assert labels_to_reach(curve, 0.6) is None


def test_data_efficiency_is_above_one_when_active_gets_there_first_and_below_when_it_does_not():
    uniform = [(100.0, 0.2), (200.0, 0.3), (300.0, 0.4)]
    faster = [(100.0, 0.2), (200.0, 0.4), (300.0, 0.5)]
    assert data_efficiency(faster, uniform) == pytest.approx(1.5)
    assert data_efficiency(uniform, faster) == pytest.approx(200 / 300)
    assert data_efficiency(uniform, uniform) == pytest.approx(1.0)


def test_data_efficiency_is_undefined_when_uniform_never_improves_on_the_shared_start():
    active = [(100, 0.3), (200, 0.5), (300, 0.6)]
    flat_uniform = [(100, 0.3), (200, 0.2), (300, 0.25)]
    assert data_efficiency(active, flat_uniform) is None


def test_a_two_generation_campaign_trains_selects_labels_and_records_metrics(tmp_path):
    messages: list[str] = []
    result = run_campaign(
        "convincing",
        generations=2,
        labels_per_generation=12,
        seed=0,
        backbone="tiny:llama",
        work_dir=tmp_path,
        progress=messages.append,
        **TINY,
    )
    assert [g.generation for g in result.generations] == [0, 1]
    assert [g.labeled_solutions for g in result.generations] == [12, 24]
    assert result.generations[1].step_labels > result.generations[0].step_labels
    # Generation 1 is the convincing-wrong-answer pick: mostly wrong answers.
    assert result.generations[1].selected_wrong_answer_share >= 0.75
    for metrics in result.generations:
        assert 0.0 <= metrics.first_error_f1 <= 1.0 and 0.0 <= metrics.step_auroc <= 1.0
        assert set(metrics.best_of_n) == {2, 4}
        assert 0.0 <= metrics.best_of_n[4]["majority"] <= 1.0
    assert len(messages) == 2
    assert result.zero_shot_auroc is None  # tiny:llama's head is not its embeddings: no surprise


def test_comparing_strategies_writes_a_table_and_a_plot(tmp_path):
    comparison = compare_strategies((0,), generations=2, labels_per_generation=8, backbone="tiny:llama", **TINY)
    assert isinstance(comparison, Comparison)
    # Generation 0 is the same uniform seed set for both strategies.
    first, again = (replace(comparison.results[s][0].generations[0], train_seconds=0.0) for s in STRATEGIES)
    assert first == again
    paths = write_report(comparison, tmp_path)
    table = paths["markdown"].read_text()
    assert "| convincing | 1 | 16 |" in table and "| uniform | 1 | 16 |" in table
    assert "data efficiency" in table.lower()
    assert paths["svg"].read_text().startswith("<svg") and "polyline" in paths["svg"].read_text()
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_fresh_pool_draws_new_solutions_to_the_same_problems_each_generation_and_a_fixed_one_does_not():
    problems = generate_problems(5, seed=0, prefix="train")
    fresh, fixed = CampaignConfig(solutions_per_problem=3), CampaignConfig(solutions_per_problem=3, pool="fixed")
    first, second = pool_solutions(problems, fresh, 0), pool_solutions(problems, fresh, 1)
    assert {s.problem_id for s in first} == {s.problem_id for s in second}
    assert not {s.solution_id for s in first} & {s.solution_id for s in second}
    assert [s.step_texts for s in first] != [s.step_texts for s in second]
    # Generation 0 is the same draw either way, so both modes share the seed set.
    assert pool_solutions(problems, fixed, 0) == first == pool_solutions(problems, fixed, 3)


def test_mean_interval_is_a_student_t_interval_over_seeds():
    mean, half = mean_interval([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0)
    assert half == pytest.approx(4.303 * 1.0 / math.sqrt(3))
    assert mean_interval([0.5]) == (0.5, 0.0)


def test_the_bootstrap_interval_brackets_the_factor_and_excludes_one_when_every_seed_is_faster():
    uniform = [[(100.0, 0.2), (200.0, 0.3), (300.0, 0.4 + 0.01 * k)] for k in range(5)]
    twice = [[(100.0, 0.2), (200.0, 0.5), (300.0, 0.6)] for _ in range(5)]
    interval, undefined = bootstrap_efficiency(twice, uniform, resamples=200)
    assert interval is not None and undefined == 0
    assert 1.0 < interval[0] <= interval[1]
    same, _ = bootstrap_efficiency(uniform, uniform, resamples=50)
    assert same is not None and same[0] == pytest.approx(1.0) and same[1] == pytest.approx(1.0)


def test_a_campaign_on_a_pretrained_sim_backbone_reports_intervals_over_seeds_in_both_budget_units(tmp_path):
    comparison = compare_strategies(
        (0, 1),
        generations=2,
        labels_per_generation=8,
        backbone="sim:digits-tiny",
        backbone_cache=str(tmp_path / "cache"),
        **TINY,
    )
    assert comparison.pretrain_seconds is not None  # an empty cache: pretrained once, for both seeds
    assert len(list((tmp_path / "cache").iterdir())) == 1
    table = comparison_markdown(comparison)
    assert "Student-t" in table and " ± " in table
    for metric in ("first_error_f1", "step_auroc", "bon_prm@4"):
        assert f"| `{metric}` | solutions |" in table and f"| `{metric}` | step labels |" in table
    assert "bootstrap" in table and "fresh pool" in table
    # The no-label baseline is printed beside the PRM's AUROC, from each seed's held-out set.
    zero_shot = [r.zero_shot_auroc for r in comparison.results["uniform"]]
    assert all(z is not None and 0.0 <= z <= 1.0 for z in zero_shot)
    # One baseline per seed, shared by both strategies like generation 0.
    assert [r.zero_shot_auroc for r in comparison.results["convincing"]] == zero_shot
    assert "summed surprise at each step's tokens, no labels" in table
    convincing, uniform = (comparison.results[s][0].generations[1] for s in STRATEGIES)
    assert convincing.labeled_solutions == uniform.labeled_solutions == 16
    again = compare_strategies(
        (0,),
        generations=1,
        labels_per_generation=8,
        backbone="sim:digits-tiny",
        backbone_cache=str(tmp_path / "cache"),
        **TINY,
    )
    assert again.pretrain_seconds is None  # the second comparison reuses the cached backbone


def test_a_worker_process_runs_a_seed_exactly_as_the_sequential_loop_does(tmp_path):
    # _run_seed is what each process of compare_strategies(workers=2) runs; called here
    # in-process so the test stays on one core.
    config = dict(generations=2, labels_per_generation=8, backbone="tiny:llama", **TINY)
    sequential = compare_strategies((1,), work_dir=tmp_path / "a", **config)
    worker = _run_seed(1, tmp_path / "b", config, verbose=False)
    for strategy, result in zip(STRATEGIES, worker, strict=True):
        expected = sequential.results[strategy][0]
        assert result.strategy == strategy and result.config == expected.config
        strip = [replace(g, train_seconds=0.0) for g in result.generations]
        assert strip == [replace(g, train_seconds=0.0) for g in expected.generations]


def test_the_command_line_passes_pool_mode_and_domain_knobs_to_every_run(tmp_path):
    import json

    from activelearn.simulation.cli import main

    args = ["--seeds", "0", "--generations", "1", "--labels-per-generation", "6", "--train-problems", "8"]
    args += ["--solutions-per-problem", "2", "--eval-problems", "4", "--epochs", "1", "--workers", "1"]
    args += ["--backbone", "tiny:llama", "--fixed-pool", "--error-rate", "0.2", "--out", str(tmp_path)]
    assert main(args) == 0
    report = json.loads((tmp_path / "campaign.json").read_text())
    for strategy in STRATEGIES:
        config = report[strategy][0]["config"]
        assert config["pool"] == "fixed" and config["domain"]["solution_error_rate"] == 0.2
    assert "one fixed pool" in (tmp_path / "campaign.md").read_text()
