import pytest

from activelearn.checkpoints.summary import checkpoint_evaluation_rows
from activelearn.models import CheckpointStatus, PRMCheckpoint

pytestmark = pytest.mark.django_db


def test_rows_carry_the_intervals_of_the_largest_n_and_none_for_older_evaluations():
    with_intervals = {
        "labeled_solutions": 96,
        "step_auroc": 0.69,
        "first_error": {"f1": 0.24, "f1_ci": [0.15, 0.33]},
        "first_error_baselines": {"random_at_prior": {"f1": 0.1}},
        "best_of_n": {
            "4": {"problems": 48, "skipped": 0, "prm": 0.38, "prm_ci": [0.3, 0.46]},
            "16": {
                "problems": 47,
                "skipped": 1,
                "prm": 0.32,
                "majority": 0.5,
                "prm_ci": [0.22, 0.42],
                "weighted_ci": [0.38, 0.58],
                "majority_ci": [0.4, 0.6],
                "prm_minus_majority_ci": [-0.28, -0.08],
                "weighted_minus_majority_ci": [-0.05, 0.01],
            },
        },
    }
    older = {"labeled_solutions": 10, "first_error": {"f1": 0.2}, "best_of_n": {"4": {"problems": 3, "prm": 0.5}}}
    checkpoint = PRMCheckpoint.objects.create(
        base_model="tiny",
        status=CheckpointStatus.TRAINING,
        evaluation={"split:test": with_intervals, "validation": older},
    )

    test, validation = checkpoint_evaluation_rows(checkpoint=checkpoint)

    assert (test.key, test.n, test.prm, test.majority) == ("split:test", 16, 0.32, 0.5)
    assert test.f1_ci == (0.15, 0.33) and test.prm_ci == (0.22, 0.42) and test.majority_ci == (0.4, 0.6)
    assert test.prm_minus_majority_ci == (-0.28, -0.08) and test.weighted_minus_majority_ci == (-0.05, 0.01)
    assert validation.key == "validation" and validation.prm == 0.5
    assert validation.f1_ci is None and validation.prm_ci is None and validation.prm_minus_majority_ci is None
