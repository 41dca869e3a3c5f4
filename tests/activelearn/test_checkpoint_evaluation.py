import pytest
from django.core.management import call_command

from activelearn.checkpoint_evaluation import checkpoint_evaluate, trajectory_with_first_error
from activelearn.checkpoints import checkpoint_train
from activelearn.models import PRMCheckpoint, SolutionScore
from activelearn.prm.evaluation import first_error_metrics, labeled_step_auroc
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.scoring import score_solutions
from activelearn.training_data import TrainingDataFilters, labeled_solutions_list
from labeling.models import FinishReason, Problem

from .label_factories import TINY_CONFIG, Step, keyword_labels, labeled, problem, solution

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
        SolutionScore.objects.create(solution=made, checkpoint=checkpoint, score=score)


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

    result = checkpoint_evaluate(checkpoint=checkpoint, generation=HELD_OUT, best_of_n_sizes=(3, 4), trials=5)

    stored = PRMCheckpoint.objects.get(pk=checkpoint.pk)
    assert stored.evaluation == result and stored.evaluated_at is not None
    assert result["held_out"] == "generation" and result["labeled_solutions"] == 2
    assert result["best_of_n"] == {
        "3": {"problems": 2, "trials": 5, "prm_accuracy": 0.5, "majority_accuracy": 0.5, "weighted_accuracy": 0.5}
    }  # no problem has 4 candidates, so N=4 is absent

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
    expected = first_error_metrics([s.step_scores for s in scores], [2, None])
    assert result["first_error"] == {
        "error_accuracy": expected.error_accuracy,
        "correct_accuracy": expected.correct_accuracy,
        "f1": expected.f1,
        "erroneous": 1,
        "error_free": 1,
    }
    # 3 + 1 chosen-path steps, plus the error step and its alternative
    assert result["step_auroc_labeled_steps"] == 6
    assert result["step_auroc"] == pytest.approx(labeled_step_auroc(model, tokenizer, held_out).auroc)


def test_it_evaluates_on_the_validation_split_by_default(checkpoint, capsys):
    call_command("evaluate_prm", f"--checkpoint={checkpoint.pk}", "--n=1")
    evaluation = PRMCheckpoint.objects.get(pk=checkpoint.pk).evaluation
    assert evaluation["held_out"] == "validation_split"
    assert evaluation["labeled_solutions"] == checkpoint.metrics["validation_solutions"] > 0
    assert evaluation["first_error"]["erroneous"] + evaluation["first_error"]["error_free"] > 0
    assert '"held_out": "validation_split"' in capsys.readouterr().out
