from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from activelearn.selection.rules import PoolCandidate, select_convincing, select_uniform


@st.composite
def pools(draw):
    problems = draw(st.integers(min_value=1, max_value=12))
    candidates = []
    for problem in range(problems):
        for index in range(draw(st.integers(min_value=1, max_value=10))):
            candidates.append(
                PoolCandidate(
                    problem_id=f"p{problem}",
                    solution_id=f"p{problem}/s{index}",
                    score=draw(st.sampled_from([0.1, 0.3, 0.5, 0.7, 0.9])),  # ties on purpose
                    is_correct=draw(st.booleans()),
                )
            )
    return candidates


def _exclusion(pool: list[PoolCandidate], data: st.DataObject) -> set[object]:
    return set(data.draw(st.lists(st.sampled_from([c.solution_id for c in pool]), max_size=len(pool) // 3)))


@settings(max_examples=150, deadline=None)
@given(pool=pools(), k=st.integers(min_value=1, max_value=5), data=st.data())
def test_per_problem_wrong_answer_picks_are_the_highest_scoring_wrong_answers_of_their_problem(pool, k, data):
    exclude = _exclusion(pool, data)
    selected = select_convincing(pool, k_per_problem=k, exclude=exclude, seed=data.draw(st.integers(0, 9)))
    assert not {s.solution_id for s in selected} & exclude
    assert len({s.solution_id for s in selected}) == len(selected)
    per_problem = Counter(s.problem_id for s in selected)
    for problem_id, count in per_problem.items():
        available = [c for c in pool if c.problem_id == problem_id and c.solution_id not in exclude]
        assert count == min(k, len(available))  # the budget is spent when the pool allows
        picked_wrong = [s for s in selected if s.problem_id == problem_id and s.bucket == "wrong_answer"]
        assert all(s.is_correct is False for s in picked_wrong)
        unpicked_wrong = [
            c for c in available if c.is_correct is False and c.solution_id not in {s.solution_id for s in selected}
        ]
        if picked_wrong and unpicked_wrong:
            assert min(s.priority for s in picked_wrong) >= max(c.score for c in unpicked_wrong)


@settings(max_examples=150, deadline=None)
@given(pool=pools(), k_total=st.integers(min_value=1, max_value=30), data=st.data())
def test_global_top_k_takes_the_most_convincing_wrong_answers_then_the_best_of_the_rest(pool, k_total, data):
    exclude = _exclusion(pool, data)
    selected = select_convincing(pool, k_total=k_total, exclude=exclude)
    available = [c for c in pool if c.solution_id not in exclude]
    assert len(selected) == min(k_total, len(available))
    assert not {s.solution_id for s in selected} & exclude
    chosen = {s.solution_id for s in selected}
    wrong_picks = [s for s in selected if s.bucket == "wrong_answer"]
    other_picks = [s for s in selected if s.bucket == "other"]
    wrong_available = [c for c in available if c.is_correct is False]
    assert len(wrong_picks) == min(round(k_total * 0.8), len(wrong_available), k_total)
    leftovers = [c for c in available if c.solution_id not in chosen]
    if wrong_picks:
        assert min(s.priority for s in wrong_picks) >= max(
            (c.score for c in leftovers if c.is_correct is False), default=0.0
        )
    if other_picks:
        assert min(s.priority for s in other_picks) >= max((c.score for c in leftovers), default=0.0)
    assert [s.priority for s in selected] == sorted((s.priority for s in selected), reverse=True)


def test_the_mix_is_eighty_twenty_within_one_pick_when_wrong_answers_are_plentiful():
    pool = [
        PoolCandidate(f"p{p}", f"p{p}/s{i}", score=(i * 37 % 11) / 11, is_correct=i % 3 == 0)
        for p in range(50)
        for i in range(12)
    ]
    for k in (1, 2, 3, 5):
        selected = select_convincing(pool, k_per_problem=k)
        wrong = sum(s.bucket == "wrong_answer" for s in selected)
        assert abs(wrong - 0.8 * len(selected)) <= 1
    selected = select_convincing(pool, k_per_problem=2, k_total=60)
    assert len(selected) == 60 and sum(s.bucket == "wrong_answer" for s in selected) == 48


def test_selection_is_deterministic_given_a_seed():
    pool = [PoolCandidate(f"p{i % 7}", f"s{i}", score=0.5, is_correct=i % 2 == 0) for i in range(70)]
    first = select_convincing(pool, k_per_problem=2, seed=3)
    assert first == select_convincing(pool, k_per_problem=2, seed=3)
    assert select_uniform(pool, 10, seed=3) == select_uniform(pool, 10, seed=3)
    assert select_uniform(pool, 10, seed=3) != select_uniform(pool, 10, seed=4)


def test_uniform_never_picks_excluded_solutions_and_stops_at_the_pool_size():
    pool = [PoolCandidate("p", f"s{i}", 0.0, True) for i in range(10)]
    picked = select_uniform(pool, 20, exclude={"s1", "s2"})
    assert len(picked) == 8 and {"s1", "s2"}.isdisjoint(p.solution_id for p in picked)


def test_selection_needs_a_budget():
    with pytest.raises(ValueError):
        select_convincing([], wrong_share=0.8)


def test_wrong_answers_the_prm_passes_come_before_higher_scores_it_flags():
    # The flagged wrong answer has the higher aggregated score, but the PRM already finds
    # an error in it; the one it passes fools it and is the more informative label.
    flagged = PoolCandidate("p", "flagged", score=0.9, is_correct=False, passes=False)
    passing = PoolCandidate("p", "passing", score=0.6, is_correct=False, passes=True)
    other = PoolCandidate("p", "other", score=0.95, is_correct=True, passes=True)
    picks = select_convincing([flagged, passing, other], k_total=2, wrong_share=0.5)
    assert [(p.solution_id, p.bucket, p.passes) for p in picks] == [
        ("other", "other", True),
        ("passing", "wrong_answer", True),
    ]
