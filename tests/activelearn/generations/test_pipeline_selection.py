"""The selection contract the pipeline relies on (activelearn.selection.rules, shared
with the campaign simulation): checked as properties, the way generation_select calls it."""

from hypothesis import given
from hypothesis import strategies as st

from activelearn.selection.rules import PoolCandidate, Selected, select_convincing, serving_order

candidates_st = st.lists(
    st.builds(
        PoolCandidate,
        problem_id=st.integers(0, 4),
        solution_id=st.integers(0, 10**6),
        score=st.floats(0, 1),
        is_correct=st.sampled_from([True, False, None]),
    ),
    max_size=60,
    unique_by=lambda c: c.solution_id,
)


def _select(candidates: list[PoolCandidate], k: int, per_problem: bool, share: float) -> list[Selected]:
    return select_convincing(
        candidates, k_per_problem=k if per_problem else None, k_total=None if per_problem else k, wrong_share=share
    )


@given(candidates_st, st.integers(1, 30), st.booleans(), st.sampled_from([0.0, 0.5, 0.8, 1.0]))
def test_the_wrong_answer_picks_are_the_most_convincing_wrong_answers(candidates, k, per_problem, share):
    picks = _select(candidates, k, per_problem, share)

    groups = {c.problem_id if per_problem else None for c in candidates}
    for group in groups:
        members = [c for c in candidates if (c.problem_id if per_problem else None) == group]
        chosen = [p for p in picks if per_problem is False or p.problem_id == group]
        assert len(chosen) == min(k, len(members))  # the budget is always spent when the pool allows
        wrong_scores = sorted((c.score for c in members if c.is_correct is False), reverse=True)
        chosen_wrong = sorted((p.priority for p in chosen if p.is_correct is False), reverse=True)
        assert chosen_wrong == wrong_scores[: len(chosen_wrong)]
    assert len({p.solution_id for p in picks}) == len(picks)
    assert [p.priority for p in picks] == sorted((p.priority for p in picks), reverse=True)


@given(st.integers(1, 50), st.integers(0, 80), st.integers(0, 80))
def test_a_global_mix_is_eighty_twenty_unless_wrong_answers_run_short(k, n_wrong, n_right):
    candidates = [PoolCandidate(0, i, 0.3 + i / 1000, False) for i in range(n_wrong)] + [
        PoolCandidate(0, 1000 + i, 0.9 - i / 1000, True) for i in range(n_right)
    ]

    picks = _select(candidates, k, False, 0.8)

    wrong = sum(p.bucket == "wrong_answer" for p in picks)
    assert wrong == min(n_wrong, round(k * 0.8), len(picks))
    assert len(picks) == min(k, n_wrong + n_right)


def test_per_problem_k_keeps_the_overall_mix_within_one_pick():
    candidates = [PoolCandidate(g, g * 100 + i, i / 10, i % 2 == 0) for g in range(10) for i in range(8)]

    picks = _select(candidates, 2, True, 0.8)

    assert len(picks) == 20
    assert abs(sum(p.bucket == "wrong_answer" for p in picks) - 16) <= 1


def test_ungraded_solutions_never_count_as_wrong_answers():
    candidates = [PoolCandidate(0, i, 0.9, None) for i in range(5)] + [PoolCandidate(0, 9, 0.1, False)]

    picks = _select(candidates, 5, False, 0.8)

    assert [p.solution_id for p in picks if p.bucket == "wrong_answer"] == [9]


@given(candidates_st, st.integers(1, 30), st.booleans(), st.sampled_from([0.0, 0.5, 0.8, 1.0]))
def test_the_serving_order_keeps_the_wrong_answer_share_in_every_prefix(candidates, k, per_problem, share):
    picks = _select(candidates, k, per_problem, share)

    order = serving_order(picks)

    assert sorted(order, key=lambda p: str(p.solution_id)) == sorted(picks, key=lambda p: str(p.solution_id))
    wrong_total = sum(p.is_correct is False for p in picks)
    wrong_so_far = 0
    for position, pick in enumerate(order, start=1):
        wrong_so_far += pick.is_correct is False
        assert abs(wrong_so_far - position * wrong_total / len(picks)) <= 0.5 + 1e-9
    for is_wrong in (True, False):
        kind = [p.priority for p in order if (p.is_correct is False) == is_wrong]
        assert kind == sorted(kind, reverse=True)
