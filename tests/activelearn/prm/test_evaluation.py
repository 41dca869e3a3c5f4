import itertools
import json
import math
import random
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from activelearn.prm.calibration import choose_aggregation, pool_sample
from activelearn.prm.data import OutcomeSolution
from activelearn.prm.evaluation import (
    Candidate,
    Estimate,
    auroc,
    best_of_n,
    best_threshold,
    bootstrap_means,
    decayed_scores,
    error_prior,
    expected_top_pick,
    first_error_baselines,
    first_error_hits,
    first_error_interval,
    first_error_metrics,
    logit_spread,
    predicted_first_error,
    prior_threshold,
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
    full = best_of_n([first, second], n=3)
    assert (full.prm_accuracy, full.majority_accuracy) == (0.5, 0.5)
    # Weighted vote: problem 1 -> "5" (0.9 > 0.5); problem 2 -> "2" (0.8 > 0.3).
    assert full.weighted_accuracy == 0.5
    # One subset of 3 out of 3: enumerated, not drawn.
    assert full.votes_exact == 2
    single = best_of_n([first], n=1)
    # With one sample every method just picks it: accuracy is the share of right answers, exactly.
    assert single.prm_accuracy == single.majority_accuracy == single.weighted_accuracy == pytest.approx(1 / 3)
    assert best_of_n([first], n=2, draws=1, seed=7) == best_of_n([first], n=2, draws=1, seed=7)


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
    result = best_of_n([[right, wrong], short], n=2, aggregations=("min", "product"))
    assert (result.problems, result.skipped) == (1, 1)
    assert result.by_aggregation == {"min": 1.0, "product": 0.0}
    assert (result.random_accuracy, result.oracle_accuracy) == (0.5, 1.0)
    nobody = best_of_n([short], n=2)
    assert (nobody.problems, nobody.skipped) == (0, 1) and math.isnan(nobody.prm_accuracy)


def test_without_answer_groups_the_aggregation_is_the_one_whose_top_pick_is_right():
    # Per problem: a long right solution whose steps are all fairly sure, and short wrong
    # ones with one sure step. "product" favours the short wrong ones, "min" the right one.
    right = ((0.9, 0.9, 0.9, 0.9), True)
    wrong = [((0.85,), False), ((0.8,), False), ((0.97, 0.7), False)]
    choice = choose_aggregation([[right, *wrong]] * 3)
    assert choice.aggregation == "min" and choice.top_pick["min"] == 1.0 and choice.top_pick["product"] == 0.0
    assert "best-of-4 top pick (no answer groups) on 3 validation problems" in choice.reason
    assert (choice.vote, choice.majority) == ({}, None)
    # Where only the last step tells right from wrong, "last" wins on its own merit.
    late = [[((0.1, 0.9), True), ((0.2, 0.95), True), ((0.9, 0.3), False), ((0.95, 0.2), False)]]
    assert choose_aggregation(late).aggregation == "last"
    # Ties go to min: every aggregation is perfect when the sure step is the only step.
    single = [[((0.9,), True), ((0.2,), False), ((0.3,), False), ((0.1,), False)]]
    choice = choose_aggregation(single)
    assert choice.aggregation == "min" and set(choice.top_pick.values()) == {1.0}


def test_with_answer_groups_the_weighted_vote_decides_not_the_top_pick():
    # Three right solutions agree on "7", each sure of its steps but unsure of its last;
    # one wrong "8" is short and sure, so it tops the pick under every aggregation in the 4
    # of the C(5, 4) = 5 subsets that hold it. Only "mean" scores the right ones high
    # enough that two or three of them outvote "8" (1.5 > 0.99) in every subset.
    right = ((0.9, 0.9, 0.9, 0.3), True, "7")
    problem = [right, right, right, ((0.99,), False, "8"), ((0.2, 0.95), False, "9")]
    choice = choose_aggregation([problem] * 2)
    assert choice.top_pick == pytest.approx({"min": 0.2, "product": 0.2, "mean": 0.2, "last": 0.0})
    assert choice.vote == pytest.approx({"min": 0.2, "product": 0.2, "mean": 1.0, "last": 0.0})
    assert choice.aggregation == "mean"
    # Without the groups the pick decides, and its tie goes to min.
    assert choose_aggregation([[entry[:2] for entry in problem]]).aggregation == "min"
    # Majority: every subset has two or three "7"s against at most one of each wrong answer.
    assert choice.majority == 1.0
    assert "best-of-4 weighted vote on 2 validation problems" in choice.reason


def test_the_weighted_vote_counts_equal_answers_as_one_vote():
    # Two right solutions outvote a surer wrong one only when their answers are one group.
    problem = [((0.6,), True, "a"), ((0.6,), True, "a"), ((0.9,), False, "b"), ((0.1,), False, "c")]
    assert choose_aggregation([problem]).vote["min"] == 1.0
    split = [((0.6,), True, "a"), ((0.6,), True, "a2"), ((0.9,), False, "b"), ((0.1,), False, "c")]
    assert choose_aggregation([split]).vote["min"] == 0.0


def test_without_a_problem_of_four_graded_solutions_the_aggregation_is_min():
    choice = choose_aggregation([[((0.9,), True), ((0.1, 0.2), False), ((0.5,), False)]])
    assert (choice.aggregation, set(choice.top_pick.values())) == ("min", {None})
    assert "min by default" in choice.reason
    assert choose_aggregation([]).aggregation == "min"


def test_the_pool_sample_keeps_at_most_so_many_per_problem_the_same_ones_every_time():
    pool = [OutcomeSolution(f"p{i % 3}", "q", (f"step {i}",), i % 2 == 0) for i in range(60)]
    first = pool_sample(pool, per_problem=5)
    assert first == pool_sample(pool, per_problem=5)
    assert sorted(Counter(s.problem_id for s in first).values()) == [5, 5, 5]
    assert pool_sample(pool[:6], per_problem=5) == pool[:6]  # two per problem: all kept


def _brute_force(candidates: list[Candidate], n: int) -> dict[str, float]:
    """Every strategy averaged over every size-n subset, ties split evenly, by enumeration."""
    totals = {"prm": Fraction(0), "majority": Fraction(0), "weighted": Fraction(0), "random": Fraction(0)}
    totals["oracle"] = Fraction(0)
    subsets = list(itertools.combinations(candidates, n))
    for subset in subsets:
        best = max(c.score for c in subset)
        top = [c for c in subset if c.score == best]
        totals["prm"] += Fraction(sum(c.is_correct for c in top), len(top))
        totals["random"] += Fraction(sum(c.is_correct for c in subset), n)
        totals["oracle"] += any(c.is_correct for c in subset)
        for name in ("majority", "weighted"):
            votes: dict[str, Fraction] = {}
            for c in subset:
                votes[c.vote_key] = votes.get(c.vote_key, Fraction(0)) + (
                    Fraction(1) if name == "majority" else Fraction(c.score)
                )
            leaders = [key for key, total in votes.items() if total == max(votes.values())]
            right = [
                Fraction(sum(c.is_correct for c in subset if c.vote_key == key), sum(c.vote_key == key for c in subset))
                for key in leaders
            ]
            totals[name] += sum(right, Fraction(0)) / len(leaders)
    return {name: float(total / len(subsets)) for name, total in totals.items()}


@pytest.mark.parametrize("seed", range(8))
def test_best_of_n_is_the_exact_expectation_over_every_subset_ties_included(seed):
    rng = random.Random(seed)
    # Scores from a few exact binary fractions: ties in score and in summed score are common.
    # An answer is right or wrong as a whole: "a" is the right one.
    problems = [
        [Candidate(rng.choice([0.25, 0.5, 0.75]), answer, answer == "a") for answer in rng.choices("abc", k=size)]
        for size in [rng.randint(1, 8) for _ in range(4)]
    ]
    for n in range(1, 9):
        usable = [p for p in problems if len(p) >= n]
        # draws >= C(8, 4) = 70: every problem's votes are enumerated, so all is exact.
        result = best_of_n(problems, n, draws=100, seed=seed)
        assert (result.problems, result.skipped, result.votes_exact) == (
            len(usable),
            len(problems) - len(usable),
            len(usable),
        )
        if not usable:
            assert math.isnan(result.prm_accuracy)
            continue
        expected = [_brute_force(p, n) for p in usable]
        for name in ("prm", "majority", "weighted", "random", "oracle"):
            assert result.estimates[name].value == pytest.approx(
                sum(e[name] for e in expected) / len(usable), abs=1e-12
            )
            assert result.per_problem[name] == pytest.approx([e[name] for e in expected], abs=1e-12)


def test_expected_top_pick_uses_the_order_statistic_without_ties():
    # Ranked 0..5 from the top: the one at rank r is a subset's maximum with C(5 - r, n - 1) / C(6, n).
    scores = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    for rank in range(6):
        correct = [i == rank for i in range(6)]
        assert expected_top_pick(scores, correct, 3) == pytest.approx(math.comb(5 - rank, 2) / math.comb(6, 3))
    # A tie of all six shares the mass: a random pick.
    assert expected_top_pick([0.5] * 6, [True, False, False, False, False, False], 3) == pytest.approx(1 / 6)


def test_drawn_votes_match_the_enumeration_and_are_paired():
    rng = random.Random(3)
    pool = [Candidate(rng.random(), rng.choice("abcd"), False) for _ in range(14)]
    pool = [Candidate(c.score, c.answer, c.answer in "ab", group="right" if c.answer in "ab" else None) for c in pool]
    exact = best_of_n([pool], 5, draws=math.comb(14, 5))  # 2002 subsets: enumerated
    drawn = best_of_n([pool], 5, draws=1000, seed=11)
    assert (exact.votes_exact, drawn.votes_exact) == (1, 0)
    assert drawn.majority_accuracy == pytest.approx(exact.majority_accuracy, abs=0.05)
    assert drawn.weighted_accuracy == pytest.approx(exact.weighted_accuracy, abs=0.05)
    # The PRM, random and oracle never depend on the draws.
    assert (drawn.prm_accuracy, drawn.random_accuracy, drawn.oracle_accuracy) == (
        exact.prm_accuracy,
        exact.random_accuracy,
        exact.oracle_accuracy,
    )
    # Equal scores make the weighted vote a majority vote: on the same subsets, the same number.
    flat = [Candidate(0.5, c.answer, c.is_correct, group=c.group) for c in pool]
    same = best_of_n([flat], 5, draws=300, seed=5)
    assert same.weighted_accuracy == same.majority_accuracy
    assert same.minus_majority["weighted"] == Estimate(0.0, 0.0, 0.0)


def test_a_majority_tie_shares_the_credit_between_the_tied_answers():
    pair = [Candidate(0.9, "1", True), Candidate(0.1, "2", False)]
    result = best_of_n([pair], 2)
    assert result.majority_accuracy == 0.5  # one vote each
    assert result.weighted_accuracy == 1.0  # 0.9 against 0.1
    # The same answer written two ways votes together once grouped.
    grouped = [Candidate(0.2, "1/3", True, group="1/3"), Candidate(0.2, "\\frac{1}{3}", True, group="1/3")]
    wrong = [Candidate(0.9, "2", False), Candidate(0.9, "2", False), Candidate(0.1, "5", False)]
    assert best_of_n([grouped + wrong[:1] + wrong[2:]], 4).majority_accuracy == 1.0  # 2 votes against 1 and 1
    assert best_of_n([grouped + wrong], 5).majority_accuracy == 0.5  # 2 against 2, and 1


def _random_pools(problems: int, seed: int) -> list[list[Candidate]]:
    rng = random.Random(seed)
    pools = []
    for _ in range(problems):
        share = rng.random()
        pools.append(
            [Candidate(rng.random(), str(rng.randint(0, 3)), rng.random() < share) for _ in range(rng.randint(6, 12))]
        )
    return [[Candidate(c.score, "right" if c.is_correct else c.answer, c.is_correct) for c in p] for p in pools]


def test_intervals_contain_the_estimate_and_shrink_with_more_problems():
    few = best_of_n(_random_pools(20, seed=1), 4, draws=300)
    many = best_of_n(_random_pools(20, seed=1) * 4, 4, draws=300)
    for result in (few, many):
        for estimate in [*result.estimates.values(), *result.minus_majority.values()]:
            assert estimate.low <= estimate.value <= estimate.high
    for name in ("prm", "majority", "weighted", "random", "oracle"):
        width = few.estimates[name].high - few.estimates[name].low
        assert width > 0
        # Four times the problems: about half the width (1 / sqrt(4)).
        assert many.estimates[name].high - many.estimates[name].low < 0.7 * width
    # The gap to majority is paired: the PRM minus majority, problem by problem.
    differences = [p - m for p, m in zip(few.per_problem["prm"], few.per_problem["majority"], strict=True)]
    assert few.minus_majority["prm"].value == pytest.approx(sum(differences) / len(differences))
    assert best_of_n(_random_pools(20, seed=1), 4, draws=300) == few  # seeded: the same result again


def test_bootstrap_intervals_are_seeded_and_reject_an_empty_table():
    values = np.asarray([[0.0, 1.0, 0.5, 0.25]])
    assert bootstrap_means(values, resamples=500, seed=3)[1] == bootstrap_means(values, resamples=500, seed=3)[1]
    with pytest.raises(ValueError, match="at least one unit"):
        bootstrap_means(np.zeros((1, 0)))


def test_first_error_hits_agree_with_the_metrics_at_every_threshold():
    rng = random.Random(4)
    scores = [[rng.random() for _ in range(rng.randint(1, 6))] for _ in range(30)]
    firsts = [None if rng.random() < 0.3 else rng.randrange(len(s)) for s in scores]
    thresholds = [0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95]
    hits = first_error_hits(scores, firsts, thresholds)
    for column, threshold in enumerate(thresholds):
        predicted = [predicted_first_error(s, threshold) for s in scores]
        assert hits[:, column].tolist() == [p == f for p, f in zip(predicted, firsts, strict=True)]
    with pytest.raises(ValueError, match="solution 0: first error 3 outside its 2 step scores"):
        first_error_hits([[0.5, 0.5]], [3], [0.5])


def test_first_error_f1_comes_with_a_paired_interval_beside_the_random_baseline():
    rng = random.Random(5)
    scores = [[rng.random() for _ in range(rng.randint(2, 6))] for _ in range(60)]
    firsts = [None if i < 15 else rng.randrange(len(s)) for i, s in enumerate(scores)]
    prior = error_prior([len(s) for s in scores], firsts)
    interval = first_error_interval(scores, firsts, 0.3, prior, resamples=500)
    f1 = first_error_metrics(scores, firsts, 0.3).f1
    baseline = first_error_baselines([len(s) for s in scores], firsts, prior)["random_at_prior"].f1
    assert interval["f1"].value == pytest.approx(f1)
    assert interval["f1_minus_random_at_prior"].value == pytest.approx(f1 - baseline)
    for estimate in interval.values():
        assert estimate.low <= estimate.value <= estimate.high and estimate.high - estimate.low > 0


CHAMP_SCORES = Path(__file__).parents[1] / "data" / "champ_validation_step_scores.json"


def test_the_prior_threshold_flags_as_many_steps_as_there_are_errors():
    scores = [[0.9, 0.8, 0.1], [0.7, 0.95], [0.6, 0.85, 0.75, 0.2]]
    firsts = [2, None, 3]
    # 2 first errors among 9 steps: the 2/9 quantile, below which 2 of the 9 steps lie.
    threshold, metrics = prior_threshold(scores, firsts)
    assert sum(s < threshold for row in scores for s in row) == 2
    assert metrics == first_error_metrics(scores, firsts, threshold) and metrics.f1 == 1.0


@pytest.mark.parametrize("split_seed", ["0", "1", "2"])
def test_the_prior_threshold_holds_still_where_the_f1_maximiser_swings(split_seed):
    """Real validation scores of the default recipe on CHAMP (three split seeds): resampling
    the validation solutions moves the F1-maximising threshold between peaks of the F1
    curve; the error-prior quantile of all steps barely moves, and chosen on half of the
    problems it does better on the other half."""
    solutions = json.loads(CHAMP_SCORES.read_text())["validation"][split_seed]
    scores = [s["scores"] for s in solutions]
    firsts = [s["first_error"] for s in solutions]
    rules = {"argmax": best_threshold, "prior": prior_threshold}
    rng = np.random.default_rng(0)
    chosen: dict[str, list[float]] = {rule: [] for rule in rules}
    for _ in range(60):
        index = rng.integers(0, len(scores), len(scores))
        for rule, choose in rules.items():
            chosen[rule].append(choose([scores[i] for i in index], [firsts[i] for i in index])[0])
    spread = {rule: float(np.std(values)) for rule, values in chosen.items()}
    assert spread["prior"] < 0.05 and spread["prior"] < 0.7 * spread["argmax"]

    problems = sorted({s["problem_id"] for s in solutions})
    rng = np.random.default_rng(1)
    held_out_f1: dict[str, list[float]] = {rule: [] for rule in rules}
    for _ in range(40):
        half = set(rng.permutation(problems)[: len(problems) // 2])
        fit = [i for i, s in enumerate(solutions) if s["problem_id"] in half]
        check = [i for i, s in enumerate(solutions) if s["problem_id"] not in half]
        for rule, choose in rules.items():
            threshold = choose([scores[i] for i in fit], [firsts[i] for i in fit])[0]
            held_out_f1[rule].append(
                first_error_metrics([scores[i] for i in check], [firsts[i] for i in check], threshold).f1
            )
    assert np.mean(held_out_f1["prior"]) > np.mean(held_out_f1["argmax"])


def test_a_decayed_threshold_lets_a_long_error_free_solution_pass_and_still_finds_an_early_error():
    long_clean = [0.9, 0.8, 0.7, 0.6, 0.45, 0.42, 0.4, 0.4]
    early_error = [0.8, 0.2, 0.9]
    scores, firsts = [long_clean, early_error], [None, 1]
    # Flat at 0.5 the long solution's late steps are flagged: it counts as erroneous.
    assert predicted_first_error(long_clean, 0.5) == 4
    assert decayed_scores(scores, 0.0) == scores
    decayed = decayed_scores(scores, 0.5)
    # Step k's logit rises by 0.5 * log(1 + k); the first step is as it was.
    for row, original in zip(decayed, scores, strict=True):
        for k, (new, old) in enumerate(zip(row, original, strict=True)):
            assert math.log(new / (1 - new)) == pytest.approx(math.log(old / (1 - old)) + 0.5 * math.log1p(k))
    assert predicted_first_error(decayed[0], 0.5) is None
    assert predicted_first_error(decayed[1], 0.5) == 1
    assert first_error_metrics(decayed, firsts, 0.5).f1 == 1.0 > first_error_metrics(scores, firsts, 0.5).f1


def test_a_decay_in_logit_spreads_flags_the_same_steps_whatever_the_scale_of_the_logits():
    """calibration.calibrate gives the decay in standard deviations of the validation logits:
    a head whose logits are twice as large (the same ranking, sharper) flags the same steps."""
    rng = np.random.default_rng(3)
    scores = [list(rng.uniform(0.05, 0.95, size=n)) for n in rng.integers(2, 12, size=40)]
    firsts = [int(rng.integers(0, len(s))) if i % 3 else None for i, s in enumerate(scores)]
    sharper = [[1 / (1 + ((1 - p) / p) ** 2) for p in row] for row in scores]
    assert logit_spread(sharper) == pytest.approx(2 * logit_spread(scores))
    flags = []
    for rows in (scores, sharper):
        decayed = decayed_scores(rows, 0.3 * logit_spread(rows))
        threshold, metrics = prior_threshold(decayed, firsts)
        flags.append(([predicted_first_error(row, threshold) for row in decayed], metrics))
    assert flags[0] == flags[1]
