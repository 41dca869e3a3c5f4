import time

import pytest

from activelearn.grading.equivalence import answer_groups

from .hanging_grader import hangs_on_request

# One problem whose reference is 1/2: every answer below is wrong, so only the grader's
# comparisons among them can group them.
THIRDS = [
    ("1/3", False),
    ("\\frac{1}{3}", False),
    ("$\\frac13$", False),
    ("0.3333333", False),  # the grader takes 6 decimals for the fraction
    ("0.33", False),  # ... and not 2
    ("2/3", False),
    ("1/3", False),
]
# Another: right answers written three ways, a wrong one twice, and a string graded both ways.
MIXED = [
    ("x = 2", True),
    ("2", True),
    ("\\boxed{2}", True),
    ("7", False),
    ("7.0", False),
    ("2", False),
]


@pytest.fixture(scope="module")
def grouped():
    started = time.perf_counter()
    groups, stats = answer_groups([THIRDS, MIXED, [("0.33", False), ("1/3", False)]])
    return groups, stats, time.perf_counter() - started


def test_answers_the_grader_takes_for_equal_vote_together_and_different_ones_apart(grouped):
    groups, _, _ = grouped
    thirds = groups[0]
    assert thirds[0] == thirds[1] == thirds[2] == thirds[3] == thirds[6] == "1/3"  # the most frequent spelling
    assert len({thirds[0], thirds[4], thirds[5]}) == 3  # 1/3, 0.33 and 2/3 are three answers


def test_every_answer_graded_correct_is_one_group_with_its_spellings(grouped):
    groups, _, _ = grouped
    mixed = groups[1]
    assert mixed[0] == mixed[1] == mixed[2] == mixed[5]  # right three ways; "2" graded wrong once joins them
    assert mixed[3] == mixed[4] != mixed[0]  # 7 and 7.0 normalise alike


def test_distinct_strings_are_compared_once_across_problems(grouped):
    _, stats, seconds = grouped
    # Distinct normalised wrong answers: 1/3, \frac{1}{3} (also $\frac13$), 0.3333333, 0.33
    # and 2/3; then 7 (and 7.0); then 0.33 and 1/3 again. Ten pairs in the first problem,
    # each compared once, and the three equal ones again the other way round; the third
    # problem's pair was settled in the first.
    assert stats.distinct_wrong_answers == 5 + 1 + 2
    assert stats.comparisons == 10 + 3
    assert (stats.problems, stats.candidates, stats.undecided) == (3, 15, 0)
    assert stats.seconds <= seconds


def test_a_comparison_that_hangs_is_cut_off_and_counts_as_different():
    started = time.perf_counter()
    # "hang" sorts before "x^2", so it is the side the grader is given (and hangs on).
    answers = [[("hang", False), ("x^2", False), ("x^2", False)]]
    groups, stats = answer_groups(answers, timeout_s=1.0, grader=hangs_on_request)
    assert time.perf_counter() - started < 30
    assert groups == [["hang", "x^2", "x^2"]] and stats.undecided == 1


def test_no_comparison_starts_no_worker():
    groups, stats = answer_groups([[("5", True), ("5", True)], [("6", False)], []])
    assert groups == [["5", "5"], ["6"], []]
    assert stats.comparisons == 0 and stats.seconds < 1.0
