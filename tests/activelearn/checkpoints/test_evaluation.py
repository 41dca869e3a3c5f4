import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from activelearn.checkpoints import training_data
from activelearn.checkpoints.evaluation import checkpoint_evaluate
from activelearn.checkpoints.runs import checkpoint_train, checkpoint_training_set
from activelearn.checkpoints.training_data import OutcomeDataFilters, TrainingDataFilters, labeled_solutions_list
from activelearn.models import PRMCheckpoint, SolutionScore
from activelearn.prm.data import trajectory_with_first_error
from activelearn.prm.evaluation import first_error_metrics, labeled_step_auroc
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.scoring import score_solutions
from labeling.models import FinishReason, Problem, Solution
from tests.activelearn.label_factories import TINY_CONFIG, Step, keyword_labels, labeled, problem, solution

pytestmark = pytest.mark.django_db

HELD_OUT = 7


@pytest.fixture
def checkpoint(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path
    keyword_labels(8, seed=1, generation_number=0)
    return checkpoint_train(base_model="tiny:bert", through_generation=0, config={**TINY_CONFIG, "max_steps": 2})


def _pool(the_problem: Problem, checkpoint: PRMCheckpoint, candidates: list[tuple[float, str, bool]]) -> None:
    for index, (score, answer, correct) in enumerate(candidates):
        made = solution(of=the_problem, steps=[f"try {index}"], final_answer=answer)
        made.is_correct = correct
        made.save(update_fields=["is_correct"])
        SolutionScore.objects.create(solution=made, checkpoint=checkpoint, score=score, step_scores=[score])


def test_it_stores_hand_checkable_metrics_for_a_generation(checkpoint):
    first, second = problem(answer="7"), problem(answer="3")
    # Labeler found an error at step 2 (alternative rated too); the other solution is error free.
    labeled(
        [
            Step(completions=[("start correct", 1)]),
            Step(completions=[("go on correct", 1)]),
            Step(completions=[("oops wrong", -1), ("fixed correct", 1)], chosen=None),
        ],
        generation_number=HELD_OUT,
        of=first,
    )
    labeled(
        [Step(completions=[("fine correct", 1)]), Step(completions=[("done correct", 0)])],
        generation_number=HELD_OUT,
        finish_reason=FinishReason.SOLUTION,
        of=second,
    )
    # first problem: the top score is wrong; majority (7) right; weighted 0.9 ("5") > 0.3 + 0.2 ("7")
    _pool(first, checkpoint, [(0.9, "5", False), (0.3, "7", True), (0.2, "7", True)])
    # second problem: the top score is right; majority (4) wrong; weighted 0.8 ("3") > 0.2 + 0.1 ("4")
    _pool(second, checkpoint, [(0.8, "3", True), (0.2, "4", False), (0.1, "4", False)])

    result = checkpoint_evaluate(checkpoint=checkpoint, generation=HELD_OUT, best_of_n_sizes=(3, 4))

    stored = PRMCheckpoint.objects.get(pk=checkpoint.pk)
    assert stored.evaluation == {"generation:7": result} and stored.evaluated_at is not None
    assert result["held_out"] == "generation:7" and result["labeled_solutions"] == 2
    assert result["threshold"] == checkpoint.threshold and result["threshold_source"].startswith("checkpoint")
    # Paired subsets of all 3: every PRM variant and both votes get one problem of two
    # right; a random pick is right 2/3 and 1/3 of the time; some candidate always is.
    everything = {
        "problems": 2,
        "skipped": 0,
        **dict.fromkeys(["prm", "prm_min", "prm_product", "prm_mean", "prm_last", "weighted", "majority"], 0.5),
        "random": pytest.approx(0.5),
        "oracle": 1.0,
    }
    row = result["best_of_n"]["3"]
    assert {key: row[key] for key in everything} == everything
    # One subset of 3 per problem: the votes are enumerated, not drawn.
    assert row["draws"] == 1000 and row["votes_exact"] == 2
    # Resampling two problems, one won by the PRM and the other by majority vote, spans
    # everything from both lost to both won; the paired gap from -1 to +1.
    assert row["prm_ci"] == row["majority_ci"] == [0.0, 1.0] and row["oracle_ci"] == [1.0, 1.0]
    assert row["prm_minus_majority"] == 0.0 and row["prm_minus_majority_ci"] == [-1.0, 1.0]
    assert "majority_minus_majority" not in row
    assert result["intervals"]["resamples"] == 2000 and result["objective"] == "process"
    # No problem has 4 candidates: N=4 is reported with both problems skipped, not dropped.
    assert result["best_of_n"]["4"]["problems"] == 0 and result["best_of_n"]["4"]["skipped"] == 2
    assert result["best_of_n"]["4"]["prm"] is None
    # The labeled solutions are not in the pool (they are tasks).
    assert result["pool"]["labeled_copies_left_out"] == 2 and result["pool"]["solutions_used"] == 6

    held_out = labeled_solutions_list(filters=TrainingDataFilters(generations=(HELD_OUT,)))
    trajectories = [trajectory_with_first_error(s) for s in held_out]
    assert trajectories == [
        (["start correct", "go on correct", "oops wrong"], 2),
        (["fine correct", "done correct"], None),
    ]
    model, tokenizer = ProcessRewardModel.from_pretrained(checkpoint.path)
    scores = score_solutions(
        model, tokenizer, [(s.problem, steps) for s, (steps, _) in zip(held_out, trajectories, strict=True)]
    )
    expected = first_error_metrics([s.step_scores for s in scores], [2, None], threshold=result["threshold"])
    metrics = {key: result["first_error"][key] for key in ("error_accuracy", "correct_accuracy", "f1")}
    assert metrics == {
        "error_accuracy": expected.error_accuracy,
        "correct_accuracy": expected.correct_accuracy,
        "f1": expected.f1,
    }
    assert (result["first_error"]["erroneous"], result["first_error"]["error_free"]) == (1, 1)
    low, high = result["first_error"]["f1_ci"]
    assert low <= expected.f1 <= high
    # One -1 step among the 5 trajectory steps: the random baseline flags at 0.2.
    assert result["error_prior"] == pytest.approx(0.2)
    # Hit the error at index 2: 0.8^2 x 0.2; pass the 2-step clean one: 0.8^2.
    random_f1 = 2 * 0.128 * 0.64 / (0.128 + 0.64)
    assert result["first_error_baselines"]["random_at_prior"]["f1"] == pytest.approx(random_f1)
    assert result["first_error_baselines"]["always_no_error"] == {
        "error_accuracy": 0.0,
        "correct_accuracy": 1.0,
        "f1": 0.0,
        "erroneous": 1,
        "error_free": 1,
    }
    # 3 + 1 chosen-path steps, plus the error step and its alternative
    assert result["step_auroc_labeled_steps"] == 6
    assert result["step_auroc"] == pytest.approx(labeled_step_auroc(model, tokenizer, held_out).auroc)


def test_answers_the_grader_takes_for_equal_vote_as_one(checkpoint):
    the_problem = problem(answer="1/2")
    labeled([Step(completions=[("half correct", 1)])], generation_number=HELD_OUT, of=the_problem)
    # Two wrong candidates write the same wrong answer two ways; the right one stands alone.
    _pool(the_problem, checkpoint, [(0.9, "1/2", True), (0.1, "1/3", False), (0.2, "\\frac{1}{3}", False)])

    result = checkpoint_evaluate(checkpoint=checkpoint, generation=HELD_OUT, best_of_n_sizes=(3,))

    # As strings, three answers tie and a third of the credit is right; as answers, 1/3 wins 2 to 1.
    assert result["best_of_n"]["3"]["majority"] == 0.0
    assert result["best_of_n"]["3"]["weighted"] == 1.0  # 0.9 against 0.1 + 0.2
    pool = result["pool"]
    assert (pool["wrong_answer_strings"], pool["wrong_answer_groups"], pool["grouping_undecided"]) == (2, 1, 0)


def test_an_orm_is_judged_by_its_final_step_score_and_its_step_metrics_are_labelled(settings, tmp_path, capsys):
    settings.CHECKPOINT_DIR = tmp_path
    for index in range(4):
        of = problem()
        Problem.objects.filter(pk=of.pk).update(split="train")
        made = solution(of=of, steps=["think it through", f"so the answer is {index}"])
        Solution.objects.filter(pk=made.pk).update(is_correct=index % 2 == 0, grading_note="correct")
    orm = checkpoint_train(
        base_model="tiny:bert",
        through_generation=None,
        config={**TINY_CONFIG, "max_steps": 2, "objective": "outcome"},
        outcome_filters=OutcomeDataFilters(splits=("train",)),
    )
    the_problem = problem(answer="4")
    labeled([Step(completions=[("four correct", 1)])], generation_number=HELD_OUT, of=the_problem)
    # The right solution has the lower minimum and the higher final score.
    for index, (answer, correct, steps) in enumerate([("4", True, [0.1, 0.9]), ("5", False, [0.5, 0.2])]):
        made = solution(of=the_problem, steps=[f"step {index}", "end"], final_answer=answer)
        Solution.objects.filter(pk=made.pk).update(is_correct=correct)
        SolutionScore.objects.create(solution=made, checkpoint=orm, score=steps[-1], step_scores=steps)

    call_command("evaluate_prm", f"--checkpoint={orm.pk}", f"--generation={HELD_OUT}", "--n=2")

    result = PRMCheckpoint.objects.get(pk=orm.pk).evaluation[f"generation:{HELD_OUT}"]
    assert (result["objective"], result["aggregation"]) == ("outcome", "last")
    # The final step picks the right one (0.9 > 0.2); the lowest step would not (0.1 < 0.2).
    assert result["best_of_n"]["2"]["prm"] == result["best_of_n"]["2"]["prm_last"] == 1.0
    assert result["best_of_n"]["2"]["prm_min"] == 0.0
    # Its step metrics are still computed, beside a note saying what they read.
    assert result["step_metrics_note"] and "first error of an ORM" in capsys.readouterr().err
    assert result["first_error"] is not None and result["labeled_solutions"] == 1
    assert result["held_out_problems_in_training"] == 0


def test_it_evaluates_on_the_validation_split_by_default(checkpoint, capsys):
    call_command("evaluate_prm", f"--checkpoint={checkpoint.pk}", "--n=1")
    evaluation = PRMCheckpoint.objects.get(pk=checkpoint.pk).evaluation["validation"]
    assert evaluation["held_out"] == "validation"
    assert evaluation["labeled_solutions"] == checkpoint.metrics["validation_solutions"] > 0
    assert evaluation["first_error"]["erroneous"] + evaluation["first_error"]["error_free"] > 0
    assert '"held_out": "validation"' in capsys.readouterr().out


def _split_labels(split: str, count: int, seed: int) -> list[str]:
    built = keyword_labels(count, seed=seed)
    Problem.objects.filter(pk__in=[b.problem.pk for b in built]).update(split=split)
    return [b.problem.unique_id for b in built]


def test_it_trains_on_one_split_validates_on_another_and_evaluates_on_a_third(settings, tmp_path, capsys):
    settings.CHECKPOINT_DIR = tmp_path
    _split_labels("train", 8, seed=11)
    validation_ids = _split_labels("validation", 3, seed=12)
    test_ids = _split_labels("test", 4, seed=13)
    call_command(
        "train_prm",
        "--backbone=tiny:bert",
        "--split=train",
        "--validation-split=validation",
        "--max-steps=2",
        "--max-length=64",
        "--learning-rate=0.01",
        "--no-progress",
    )
    out = capsys.readouterr().out
    # Every epoch: accuracy beside the majority-class baseline, and AUROC.
    assert "majority class" in out and "val step AUROC" in out and "first-error threshold" in out
    checkpoint = PRMCheckpoint.objects.get()
    assert checkpoint.metrics["train_solutions"] == 8 and checkpoint.metrics["validation_solutions"] == 3
    assert checkpoint.threshold is not None and checkpoint.aggregation in {"min", "product", "mean", "last"}
    assert checkpoint.calibration["solutions"] == 3

    call_command("evaluate_prm", "--split=test", "--n=1")
    result = PRMCheckpoint.objects.get(pk=checkpoint.pk).evaluation["split:test"]
    assert result["labeled_solutions"] == 4 and result["held_out_problems"] == 4
    assert result["held_out_problems_in_training"] == 0
    # The default held-out set is the checkpoint's validation split, kept beside the test numbers.
    call_command("evaluate_prm", "--n=1")
    stored = PRMCheckpoint.objects.get(pk=checkpoint.pk).evaluation
    assert set(stored) == {"split:test", "validation"}
    assert stored["validation"]["labeled_solutions"] == 3
    assert {s.problem_id for s in labeled_solutions_list(filters=TrainingDataFilters(splits=("test",)))} == set(
        test_ids
    )
    assert validation_ids


def _graded_validation_pool() -> None:
    """Human labels on 8 training and 3 validation problems, and graded solutions (no human
    label): five on each of two validation problems, three on the third (too few for
    best-of-4), and some on a training problem, which stays out of the pool."""
    train_ids = _split_labels("train", 8, seed=11)
    validation_ids = _split_labels("validation", 3, seed=12)
    for unique_id, count in [(validation_ids[0], 5), (validation_ids[1], 5), (validation_ids[2], 3)]:
        of = Problem.objects.get(unique_id=unique_id)
        for i in range(count):
            graded = solution(of=of, steps=[f"step {i} correct", "so wrong" if i % 2 else "so correct"])
            Solution.objects.filter(pk=graded.pk).update(is_correct=i % 2 == 0)
    trained_on = Problem.objects.get(unique_id=train_ids[0])
    for i in range(6):
        graded = solution(of=trained_on, steps=[f"other {i}"])
        Solution.objects.filter(pk=graded.pk).update(is_correct=True)


def _train_tiny(*options: str) -> PRMCheckpoint:
    call_command(
        "train_prm",
        "--backbone=tiny:bert",
        "--split=train",
        "--validation-split=validation",
        "--max-steps=2",
        "--max-length=64",
        "--no-progress",
        *options,
    )
    return PRMCheckpoint.objects.latest("pk")


def test_it_chooses_the_aggregation_on_the_validation_problems_graded_solutions(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path
    _graded_validation_pool()
    calibration = _train_tiny().calibration
    assert (calibration["pool_problems"], calibration["pool_solutions"]) == (2, 13)
    # The pool's answers are grouped, so the weighted vote decides; the pick is recorded.
    table = calibration["aggregation_vote"]
    for recorded in (table, calibration["aggregation_best_of"]):
        assert set(recorded) == {"min", "product", "mean", "last"} and all(0.0 <= v <= 1.0 for v in recorded.values())
    first_best = next(name for name in ("min", "product", "mean", "last") if table[name] == max(table.values()))
    assert calibration["aggregation"] == first_best
    assert 0.0 <= calibration["majority_vote"] <= 1.0
    assert PRMCheckpoint.objects.get().aggregation == calibration["aggregation"]
    assert "best-of-4 weighted vote on 2 validation problems" in calibration["aggregation_reason"]


def test_a_fixed_aggregation_scores_no_pool_solution_and_leaves_the_threshold_as_it_was(
    settings, tmp_path, monkeypatch
):
    from activelearn.prm import calibration as calibration_module
    from activelearn.prm.scoring import score_solutions

    settings.CHECKPOINT_DIR = tmp_path
    _graded_validation_pool()
    scored: list[int] = []

    def counting(model, tokenizer, items, *args, **kwargs):
        scored.append(len(items))
        return score_solutions(model, tokenizer, items, *args, **kwargs)

    monkeypatch.setattr(calibration_module, "score_solutions", counting)
    # Loading and grouping the graded pool grows with a deployment's validation pool: a run
    # with a fixed aggregation, and an evaluation, never build it.
    pool_loads: list[int] = []
    outcome_solutions = training_data.outcome_solutions_list

    def counting_pool(*args, **kwargs):
        found = outcome_solutions(*args, **kwargs)
        if kwargs.get("grouped"):
            pool_loads.append(len(found))
        return found

    monkeypatch.setattr(training_data, "outcome_solutions_list", counting_pool)
    chosen = _train_tiny()
    assert sum(scored) == 3 + 3 + 13  # trajectories, whole solutions, the pool
    assert pool_loads == [13]
    assert len(checkpoint_training_set(checkpoint=chosen).selection_pool) == 13
    scored.clear()
    pool_loads.clear()
    fixed = _train_tiny("--aggregation=last")
    # Only the 3 labeled validation trajectories, which the threshold needs.
    assert scored == [3]
    assert pool_loads == []
    assert checkpoint_training_set(checkpoint=fixed).selection_pool == []
    call_command("evaluate_prm", f"--checkpoint={chosen.pk}", "--split=validation", "--n=1")
    assert pool_loads == []
    assert fixed.aggregation == fixed.calibration["aggregation"] == "last"
    assert fixed.calibration["pool_solutions"] == 0 and fixed.calibration["aggregation_vote"] == {}
    assert "fixed by the training config" in fixed.calibration["aggregation_reason"]
    assert fixed.hyperparameters["train"]["aggregation"] == "last"
    # The same data and seed: the threshold and its validation F1 do not depend on how the
    # aggregation was settled.
    assert fixed.threshold == pytest.approx(chosen.threshold)
    assert fixed.calibration["first_error"] == chosen.calibration["first_error"]
    with pytest.raises(CommandError, match="invalid choice: 'median'"):
        _train_tiny("--aggregation=median")


def test_it_refuses_a_validation_split_that_overlaps_training(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path
    _split_labels("train", 4, seed=21)
    with pytest.raises(CommandError, match="both the training and the validation"):
        call_command("train_prm", "--backbone=tiny:bert", "--split=train", "--validation-split=train", "--no-progress")
    assert not PRMCheckpoint.objects.exists()


def test_it_warns_when_the_held_out_problems_were_trained_on(checkpoint, capsys):
    call_command("evaluate_prm", f"--checkpoint={checkpoint.pk}", "--generation=0", "--n=1")
    result = PRMCheckpoint.objects.get(pk=checkpoint.pk).evaluation["generation:0"]
    assert result["held_out_problems_in_training"] == checkpoint.metrics["train_solutions"] > 0
    assert "not held-out numbers" in capsys.readouterr().err


def test_a_falling_threshold_is_chosen_on_validation_and_evaluation_reads_scores_by_the_same_rule(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path
    _split_labels("train", 8, seed=11)
    _split_labels("validation", 6, seed=12)
    flat = _train_tiny("--aggregation=min", "--threshold-decay=0")
    falling = _train_tiny("--aggregation=min", "--threshold-decay=0.5")
    assert flat.calibration["threshold_decay"] == 0.0
    assert "falling" not in flat.calibration["threshold_rule"]
    assert falling.calibration["threshold_decay_sd"] == 0.5
    # Given in spreads of the validation logits, stored in this head's logits.
    assert falling.calibration["threshold_decay"] > 0
    assert "falling by decay" in falling.calibration["threshold_rule"]
    assert falling.hyperparameters["train"]["threshold_decay"] == 0.5
    for checkpoint in (flat, falling):
        result = checkpoint_evaluate(checkpoint=checkpoint, splits=["validation"], best_of_n_sizes=[1])
        assert result["threshold_decay"] == checkpoint.calibration["threshold_decay"]
        # The validation solutions again: the metrics calibration chose the threshold by.
        assert {k: result["first_error"][k] for k in checkpoint.calibration["first_error"]} == pytest.approx(
            checkpoint.calibration["first_error"]
        )
    with pytest.raises(CommandError, match=r"threshold_decay must be a finite number >= 0, got -1\.0"):
        _train_tiny("--threshold-decay=-1")
