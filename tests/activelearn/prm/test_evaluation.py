import pytest

from activelearn.prm.evaluation import Candidate, auroc, best_of_n, first_error_metrics, predicted_first_error


def test_auroc_matches_hand_counts_including_ties():
    # Positive/negative pairs: (0.9 vs 0.1, 0.4, 0.4) win 3, (0.4 vs 0.1) wins 1,
    # (0.4 vs 0.4) ties twice -> (3 + 1 + 2 * 0.5) / 6.
    assert auroc([0.9, 0.4, 0.1, 0.4, 0.4], [True, True, False, False, False]) == pytest.approx(5 / 6)
    assert auroc([0.1, 0.2, 0.8, 0.9], [False, False, True, True]) == 1.0
    assert auroc([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    with pytest.raises(ValueError):
        auroc([0.5, 0.6], [True, True])


def test_first_error_metrics_follow_processbench():
    assert predicted_first_error([0.9, 0.4, 0.2]) == 1
    assert predicted_first_error([0.9, 0.8], threshold=0.85) == 1
    assert predicted_first_error([0.9, 0.8]) is None
    scores = [
        [0.9, 0.3, 0.1],  # error at 1, predicted 1: hit
        [0.2, 0.9],  # error at 1, predicted 0: miss
        [0.9, 0.9],  # no error, predicted none: hit
        [0.9, 0.4],  # no error, predicted 1: miss
        [0.8, 0.7],  # no error, predicted none: hit
    ]
    metrics = first_error_metrics(scores, [1, 1, None, None, None])
    assert metrics.error_accuracy == pytest.approx(0.5)
    assert metrics.correct_accuracy == pytest.approx(2 / 3)
    assert metrics.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert (metrics.erroneous, metrics.error_free) == (2, 3)


def test_best_of_n_against_majority_vote_on_a_toy_case():
    # Problem 1: the PRM ranks the lone right answer first, the majority is wrong.
    first = [Candidate(0.9, "5", True), Candidate(0.2, "6", False), Candidate(0.3, "6", False)]
    # Problem 2: the PRM prefers a wrong answer, the majority is right.
    second = [Candidate(0.1, "1", True), Candidate(0.2, "1", True), Candidate(0.8, "2", False)]
    full = best_of_n([first, second], n=3, trials=4)
    assert (full.prm_accuracy, full.majority_accuracy) == (0.5, 0.5)
    # Weighted vote: problem 1 -> "5" (0.9 > 0.5); problem 2 -> "2" (0.8 > 0.3).
    assert full.weighted_accuracy == 0.5
    single = best_of_n([first], n=1, trials=300, seed=7)
    # With one sample both methods just pick it: accuracy is the share of right answers.
    assert single.prm_accuracy == single.majority_accuracy
    assert single.prm_accuracy == pytest.approx(1 / 3, abs=0.08)
    assert best_of_n([first], n=1, trials=50, seed=7) == best_of_n([first], n=1, trials=50, seed=7)
