from typing import Any

import pytest

from activelearn.simulation.arms import ARMS, MAIN_CONVINCING, arm_named
from activelearn.simulation.study import Study, run_study, run_sweep

TINY: dict[str, Any] = dict(
    backbone="sim:digits-tiny",
    generations=2,
    labels_per_generation=6,
    train_problems=12,
    solutions_per_problem=4,
    eval_problems=5,
    eval_solutions_per_problem=4,
    best_of_n_sizes=(2, 4),
    num_epochs=1,
    max_length=128,
    rollouts=3,
)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Study:
    cache = tmp_path_factory.mktemp("cache")
    return run_study((0,), tuple(ARMS), backbone_cache=str(cache), **TINY)


def test_every_arm_trains_and_evaluates_each_generation_on_the_same_budget(study):
    assert set(study.results) == set(ARMS)
    for arm, (result,) in study.results.items():
        assert [g.labeled_solutions for g in result.generations] == [6, 12], arm
        for generation in result.generations:
            assert 0.0 <= generation.step_auroc <= 1.0 and generation.best_of_n[4]["prm"] >= 0.0


def test_only_the_oracle_arms_spend_human_step_labels_and_orm_pool_trains_on_the_whole_pool(study):
    for arm, (result,) in study.results.items():
        spent = result.generations[-1].step_labels
        assert (spent > 0) == (arm_named(arm).labels == "oracle"), arm
    # 12 problems x 4 solutions, a fresh draw in each of the two generations.
    assert study.results["orm-pool"][0].generations[-1].trained_on == 96
    assert study.results["orm"][0].generations[-1].trained_on == 12


def test_arms_that_sample_uniformly_label_the_uniform_arms_solutions(study):
    # Same picks: the wrong-answer share of what each generation picked is the same.
    uniform = [g.selected_wrong_answer_share for g in study.results["uniform"][0].generations]
    for arm in ("orm", "shepherd-hard", "shepherd-soft"):
        assert [g.selected_wrong_answer_share for g in study.results[arm][0].generations] == uniform


def test_the_report_renders_every_section_beside_the_label_free_baseline(study, tmp_path):
    text = study.to_markdown()
    assert "label-free surprise" in text and "majority vote" in text
    for metric in ("bon_prm@4", "first_error_f1", "step_auroc"):
        assert f"`{metric}` by labeled solutions" in text
    for arm in ARMS:
        assert f"| {arm} |" in text
    assert f"| {MAIN_CONVINCING} | `bon_prm@4` | solutions |" in text
    assert "PRM against ORM at equal labeled solutions" in text and "Math-Shepherd" in text
    paths = study.write_report(tmp_path)
    assert paths["png"].read_bytes().startswith(b"\x89PNG")
    assert '"orm-pool"' in paths["json"].read_text()


def test_an_unknown_arm_or_a_study_without_uniform_is_refused():
    with pytest.raises(ValueError, match="unknown arm 'best'"):
        run_study((0,), ("uniform", "best"), **TINY)
    with pytest.raises(ValueError, match="include it"):
        run_study((0,), ("orm",), **TINY)


def test_the_sweep_pretrains_a_backbone_per_share_and_plots_the_factor_against_it(tmp_path):
    sweep = run_sweep((0.0, 1.0), (0, 1), backbone_cache=str(tmp_path / "cache"), **TINY)
    # One pretraining per generator: the corpus is that share's own samples.
    assert len(list((tmp_path / "cache").iterdir())) == 2
    assert [s.config.domain.systematic_share for s in sweep.studies.values()] == [0.0, 1.0]
    text = sweep.to_markdown()
    cells = [line.split(" | ") for line in text.splitlines() if line.startswith(("| 0 ", "| 1 "))]
    rows = {first: rest for first, *rest in cells}
    # Columns: wrong-answer share, misconception share of first errors, surprise, majority, ...
    assert rows["| 0"][1] == "0.00" and rows["| 1"][1] == "1.00"
    # The default generator (home) is mostly right once its errors are its misconceptions;
    # at share 0 it corrupts 60% of its solutions at random.
    assert float(rows["| 1"][0]) < 0.45 < float(rows["| 0"][0])
    # At share 0 the sweep's PRM must be the random-error campaign's: it reads the surprise.
    assert all(s.config.step_features is None for s in sweep.studies.values())
    assert "reads the LM's surprise beside the hidden state" in text
    paths = sweep.write_report(tmp_path / "report")
    assert paths["png"].read_bytes().startswith(b"\x89PNG")


def test_single_seed_studies_written_as_json_merge_into_one_report(study, tmp_path):
    import json

    path = study.write_report(tmp_path)["json"]
    again = Study.from_json(json.loads(path.read_text()))
    assert again.results == study.results
    merged = Study.merged([again, again])
    assert [len(runs) for runs in merged.results.values()] == [2] * len(ARMS)
    assert "seeds [0, 0]" in merged.to_markdown()
