"""labeling.quality.agreement: the definitions in docs/quality.md on hand-computed cases."""

from __future__ import annotations

import pytest

from labeling.quality.agreement import Gold, first_negative, ordinal_alpha, solution_agrees, steps_agreeing

NON_NEG = frozenset({0, 1})
NEG_ONLY = frozenset({-1})
ANY = frozenset({-1, 0, 1})


def gold(*steps: frozenset[int]) -> Gold:
    return Gold(acceptable=dict(enumerate(steps)), step_count=len(steps))


ERROR_AT_2 = gold(NON_NEG, NON_NEG, NEG_ONLY, NON_NEG, NON_NEG)
NO_ERROR = gold(NON_NEG, NON_NEG, NON_NEG)
ERROR_AT_1_OR_3 = gold(NON_NEG, ANY, NON_NEG, NEG_ONLY, NON_NEG)


@pytest.mark.parametrize(
    ("g", "ratings", "finish", "expected"),
    [
        (ERROR_AT_2, {0: 1, 1: 0, 2: -1}, "found_error", True),
        (ERROR_AT_2, {0: 1, 1: -1}, "found_error", False),  # too early
        (ERROR_AT_2, {0: 1, 1: 1, 2: 1, 3: -1}, "found_error", False),  # passed the error
        (ERROR_AT_2, {0: 1, 1: 1, 2: 1, 3: 1, 4: 1}, "solution", False),  # found none
        (NO_ERROR, {0: 1, 1: 0, 2: 1}, "solution", True),
        (NO_ERROR, {0: 1, 1: -1}, "found_error", False),
        (NO_ERROR, {0: 1, 1: 1}, "solution", False),  # did not rate every step
        (ERROR_AT_1_OR_3, {0: 1, 1: -1}, "found_error", True),
        (ERROR_AT_1_OR_3, {0: 1, 1: 1, 2: 0, 3: -1}, "found_error", True),
        (ERROR_AT_1_OR_3, {0: 1, 1: 1, 2: -1}, "found_error", False),
        (ERROR_AT_2, {0: 1, 1: 0, 2: -1}, "give_up", False),  # give up never agrees
        (ERROR_AT_2, {0: 1, 1: 0, 2: -1}, "bad_problem", False),
    ],
)
def test_it_decides_solution_agreement_by_the_first_negative_step(g, ratings, finish, expected):
    assert solution_agrees(gold=g, ratings=ratings, finish_reason=finish) is expected


def test_it_treats_steps_without_a_gold_row_as_passable_non_errors():
    partial = Gold(acceptable={2: NEG_ONLY}, step_count=4)
    assert solution_agrees(gold=partial, ratings={0: 1, 1: 0, 2: -1}, finish_reason="found_error")
    assert not solution_agrees(gold=partial, ratings={0: -1}, finish_reason="found_error")


def test_it_counts_agreeing_steps_as_the_secondary_figure():
    # steps 0,1 fine; step 2 rated -1 (ok) -> 3 of 3
    assert steps_agreeing(gold=ERROR_AT_2, ratings={0: 1, 1: 0, 2: -1}) == (3, 3)
    # step 1 rated -1 where it may not be -> 1 of 2
    assert steps_agreeing(gold=ERROR_AT_2, ratings={0: 1, 1: -1}) == (1, 2)
    # unrated steps do not count
    assert steps_agreeing(gold=ERROR_AT_2, ratings={0: 1, 1: None}) == (1, 1)


def test_it_finds_the_first_negative_step():
    assert first_negative({0: 1, 3: -1, 2: -1}) == 2
    assert first_negative({0: 1, 1: 0}) is None


def test_it_computes_ordinal_alpha_on_a_hand_checked_case():
    # Two coders, four units: (1,1), (0,0), (-1,-1), (1,0). n = 8 values,
    # n(-1)=2, n(0)=3, n(1)=3. Ordinal distances d(c,k) = (sum of n_g from c
    # to k - (n_c+n_k)/2)^2: d(0,1)=9, d(-1,0)=6.25, d(-1,1)=30.25.
    # Observed: only unit 4 disagrees, o(0,1)=o(1,0)=1 -> Do = 18/8 = 2.25.
    # Expected: De = 2*(2*3*6.25 + 2*3*30.25 + 3*3*9)/(8*7) = 600/56.
    # alpha = 1 - 2.25*56/600 = 0.79.
    units = [{"a": 1, "b": 1}, {"a": 0, "b": 0}, {"a": -1, "b": -1}, {"a": 1, "b": 0}]
    assert ordinal_alpha(units) == pytest.approx(0.79)


def test_it_has_no_alpha_without_pairs_or_variation():
    assert ordinal_alpha([{"a": 1}, {"b": 0}]) is None
    assert ordinal_alpha([{"a": 1, "b": 1}, {"a": 1, "b": 1}]) is None


def test_it_gives_perfect_alpha_for_perfect_agreement():
    assert ordinal_alpha([{"a": 1, "b": 1}, {"a": -1, "b": -1}, {"a": 0, "b": 0}]) == pytest.approx(1.0)
