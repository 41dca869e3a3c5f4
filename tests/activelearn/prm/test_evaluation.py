import math

import pytest

from activelearn.prm.calibration import AGGREGATION_MARGIN, choose_aggregation
from activelearn.prm.evaluation import (
    Candidate,
    auroc,
    best_of_n,
    best_threshold,
    first_error_baselines,
    first_error_metrics,
    predicted_first_error,
)


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


def test_first_error_baselines_are_the_expected_values_of_trivial_scorers():
    # Two erroneous solutions (first error at 0 and 2), one error-free of 3 steps.
    baselines = first_error_baselines([1, 3, 3], [0, 2, None], prior=0.5)
    never = baselines["always_no_error"]
    assert (never.error_accuracy, never.correct_accuracy, never.f1) == (0.0, 1.0, 0.0)
    coin = baselines["random_at_prior"]
    # Hit at 0: 0.5; hit at 2: 0.5^2 x 0.5; pass all 3: 0.5^3.
    assert coin.error_accuracy == pytest.approx((0.5 + 0.125) / 2)
    assert coin.correct_accuracy == pytest.approx(0.125)
    assert coin.f1 == pytest.approx(2 * 0.3125 * 0.125 / (0.3125 + 0.125))


def test_best_threshold_finds_the_cut_that_a_fixed_half_misses():
    # Every score is above 0.5, so 0.5 flags nothing; between 0.7 and 0.9 separates.
    scores = [[0.95, 0.7], [0.9, 0.92, 0.6], [0.93, 0.91]]
    assert first_error_metrics(scores, [1, 2, None]).f1 == 0.0
    threshold, metrics = best_threshold(scores, [1, 2, None])
    assert 0.7 < threshold < 0.9 and metrics.f1 == 1.0


def test_best_of_n_reports_every_strategy_on_the_same_subsets_and_counts_skipped_problems():
    # Step scores: the long right answer has the lower product but the higher min.
    right = Candidate(0.0, "1", True, step_scores=(0.8, 0.8, 0.8, 0.8))
    wrong = Candidate(0.0, "2", False, step_scores=(0.95, 0.5))
    short = [Candidate(0.0, "3", True, step_scores=(0.9,))]  # one candidate: skipped at N=2
    result = best_of_n([[right, wrong], short], n=2, trials=3, aggregations=("min", "product"))
    assert (result.problems, result.skipped) == (1, 1)
    assert result.by_aggregation == {"min": 1.0, "product": 0.0}
    assert (result.random_accuracy, result.oracle_accuracy) == (0.5, 1.0)
    nobody = best_of_n([short], n=2)
    assert (nobody.problems, nobody.skipped) == (0, 1) and math.isnan(nobody.prm_accuracy)


def test_an_aggregation_replaces_min_only_by_a_margin():
    # Twenty error-free and twenty erroneous single-step solutions separate perfectly under
    # every aggregation but one pair: "last" and "min" then tie, and min stays.
    fine = [(0.6 + i / 100,) for i in range(20)]
    bad = [(0.2 + i / 100,) for i in range(20)]
    chosen, table, reason = choose_aggregation([*fine, *bad], [False] * 20 + [True] * 20)
    assert table["min"] == table["last"] == 1.0 and chosen == "min" and str(AGGREGATION_MARGIN) in reason
    # A clear winner is taken: only the last step tells the two kinds apart here.
    clear = [(0.1, 0.9), (0.2, 0.95), (0.9, 0.3), (0.95, 0.2)]
    chosen, table, reason = choose_aggregation(clear, [False, False, True, True])
    assert chosen == "last" and table["last"] == 1.0 and "margin" in reason
    assert choose_aggregation(clear, [True, True, True, True])[0] == "min"  # one kind only: fallback
