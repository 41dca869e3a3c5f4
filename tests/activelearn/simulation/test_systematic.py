from collections import defaultdict
from dataclasses import replace

import pytest

from activelearn.prm.modeling import NEGATIVE, POSITIVE
from activelearn.simulation.backbone import SIM_BACKBONES, PretrainConfig
from activelearn.simulation.domain import (
    MISCONCEPTION_BY_EVENT,
    MISCONCEPTIONS,
    DomainConfig,
    build_dataset,
    continue_solution,
)
from activelearn.simulation.shepherd import hard_labeled_solution, rollout_shares, soft_examples

SYSTEMATIC = DomainConfig(systematic_share=1.0)


@pytest.fixture(scope="module")
def systematic():
    return build_dataset(100, 16, seed=2, config=SYSTEMATIC)


def test_a_misconception_writes_the_same_wrong_step_in_the_same_context_in_every_sample(systematic):
    seen: dict[tuple[object, ...], set[tuple[object, ...]]] = defaultdict(set)
    for solution in systematic.all_solutions():
        for step in solution.steps:
            if step.error == "misconception":
                assert step.plan_index is not None and step.written is not None
                context = (solution.problem_id, step.plan_index, solution.written_values[: step.plan_index])
                seen[context].add((step.misconception, step.written))
    assert len(seen) > 100
    # One problem's step after the same written values: one misconception, one wrong
    # expression, however many samples hold it.
    assert all(len(variants) == 1 for variants in seen.values())


def test_each_misconception_is_the_rule_of_its_event_and_is_held_far_more_often_at_home(systematic):
    problems = {p.problem_id: p for p in systematic.problems}
    held: dict[tuple[str, bool], list[bool]] = defaultdict(list)
    for solution in systematic.all_solutions():
        problem = problems[solution.problem_id]
        for step in solution.steps:
            if step.misconception is not None:
                assert step.plan_index is not None
                event = problem.plan[step.plan_index].event
                # forget_multiply skips the container step and shows on the sum after it.
                rule = MISCONCEPTION_BY_EVENT["containers" if event in ("receive", "give") else event]
                assert step.misconception == rule.name
        for rule in MISCONCEPTIONS:
            if any(s.event == rule.event for s in problem.plan[: len(problem.plan) - (rule.event == "containers")]):
                if rule.name == "sell_from_start" and all(
                    s.left.step in (None, 0) for s in problem.plan if s.event == "sell"
                ):
                    continue
                held[(rule.name, problem.setting in rule.home)].append(rule.name in solution.misconceptions)
    for rule in MISCONCEPTIONS:
        home, away = held[(rule.name, True)], held[(rule.name, False)]
        assert len(home) > 30 and len(away) > 30
        assert sum(home) / len(home) == pytest.approx(SYSTEMATIC.misconception_home_rate, abs=0.12)
        assert sum(away) / len(away) == pytest.approx(SYSTEMATIC.misconception_rate, abs=0.12)


def test_at_share_one_every_error_is_a_misconception_and_truth_is_recomputed_from_the_numbers(systematic):
    problems = {p.problem_id: p for p in systematic.problems}
    wrong = 0
    for solution in systematic.all_solutions():
        errors = [step.error for step in solution.steps if step.error]
        assert set(errors) <= {"misconception"}
        wrong += not solution.final_correct
        first = next((i for i, step in enumerate(solution.steps) if not step.is_correct), None)
        assert solution.first_error == first
        assert solution.final_correct == (solution.answer == str(problems[solution.problem_id].answer))
        assert solution.final_correct or first is not None
    assert 0.5 < wrong / len(systematic.all_solutions()) < 0.9


def test_share_zero_is_the_random_error_domain_whatever_the_misconception_rates():
    today = build_dataset(30, 6, seed=4)
    rates_changed = build_dataset(30, 6, seed=4, config=DomainConfig(misconception_home_rate=0.1))
    assert today == rates_changed
    assert not any(step.misconception for s in today.all_solutions() for step in s.steps)
    half = build_dataset(60, 8, seed=4, config=DomainConfig(systematic_share=0.5))
    kinds = {step.error for s in half.all_solutions() for step in s.steps if step.error}
    assert "misconception" in kinds and kinds - {"misconception"}


def test_a_share_outside_zero_to_one_is_refused_with_its_name():
    with pytest.raises(ValueError, match="systematic_share"):
        DomainConfig(systematic_share=1.5)


def test_a_zero_share_corpus_keeps_its_backbone_fingerprint_and_a_systematic_one_gets_its_own():
    digits = SIM_BACKBONES["digits"]
    assert replace(digits, domain=DomainConfig(misconception_rate=0.4)).fingerprint() == digits.fingerprint()
    assert PretrainConfig(domain=SYSTEMATIC).fingerprint() != digits.fingerprint()
    assert SIM_BACKBONES["systematic"].domain.systematic_share == 1.0


def test_a_completion_keeps_the_prefix_and_continues_from_its_written_values(systematic):
    problems = {p.problem_id: p for p in systematic.problems}
    solution = next(s for s in systematic.all_solutions() if s.first_error is not None and s.first_error > 0)
    import random

    completed = continue_solution(
        problems[solution.problem_id], solution, solution.first_error + 1, random.Random(0), SYSTEMATIC
    )
    assert completed.steps[: solution.first_error + 1] == solution.steps[: solution.first_error + 1]
    assert completed.first_error == solution.first_error
    assert not completed.final_correct  # the wrong value is carried on, and nothing cancels it here


def test_math_shepherd_gives_a_prefix_with_an_unrecoverable_error_zero_share_and_a_right_one_full_share():
    # Solutions with errors, rolled out by a generator that makes none: every prefix up to
    # the first error completes right, every prefix from it on completes wrong.
    noisy = build_dataset(20, 6, seed=7, config=DomainConfig(solution_error_rate=0.9, later_error_rate=0.0))
    clean = DomainConfig(solution_error_rate=0.0, later_error_rate=0.0)
    problems = {p.problem_id: p for p in noisy.problems}
    checked = 0
    for solution in noisy.all_solutions():
        if solution.first_error is None or solution.final_correct:
            continue
        labels = rollout_shares(problems[solution.problem_id], solution, rollouts=4, config=clean)
        first = solution.first_error
        assert labels.shares[:first] == (1.0,) * first
        assert labels.shares[first:] == (0.0,) * (len(solution.steps) - first)
        assert labels.hard() == (1,) * first + (-1,) * (len(solution.steps) - first)
        checked += 1
    assert checked > 20


def test_soft_shares_count_the_rollouts_that_reach_the_answer_and_train_as_two_weighted_copies(systematic):
    problems = {p.problem_id: p for p in systematic.problems}
    solution = next(s for s in systematic.all_solutions() if s.final_correct and len(s.steps) >= 4)
    labels = rollout_shares(problems[solution.problem_id], solution, rollouts=16, config=SYSTEMATIC, seed=1)
    assert labels.shares[-1] == 1.0  # the whole solution: its own, right, answer
    # A right prefix is completed right only as often as the generator gets the rest right.
    assert 0.0 < min(labels.shares) < 1.0
    assert all(share * 16 == int(share * 16) for share in labels.shares)
    positive, negative = soft_examples("problem", labels)
    assert set(positive.labels) == {POSITIVE} and set(negative.labels) == {NEGATIVE}
    assert positive.weights is not None and negative.weights is not None
    assert all(p + n == pytest.approx(1.0) for p, n in zip(positive.weights, negative.weights, strict=True))
    hard = hard_labeled_solution("problem", labels)
    assert [step.completions[0].rating for step in hard.steps] == list(labels.hard())


def test_rollouts_of_zero_are_refused():
    dataset = build_dataset(1, 1, seed=0)
    with pytest.raises(ValueError, match="rollouts"):
        rollout_shares(dataset.problems[0], dataset.all_solutions()[0], rollouts=0, config=DomainConfig())


def test_the_home_domain_holds_only_its_misconceptions_and_only_at_home():
    from activelearn.simulation.study import DOMAINS

    home = DOMAINS["home"].config
    dataset = build_dataset(200, 8, seed=3, config=home)
    problems = {p.problem_id: p for p in dataset.problems}
    rules = {rule.name: rule for rule in MISCONCEPTIONS}
    applied = [
        (step.misconception, problems[solution.problem_id].setting)
        for solution in dataset.all_solutions()
        for step in solution.steps
        if step.misconception is not None
    ]
    assert applied and {name for name, _ in applied} <= set(home.held_misconceptions or ())
    assert all(setting in rules[name].home for name, setting in applied)
    # No random errors at share 1: every wrong answer comes from a held misconception.
    solutions = dataset.all_solutions()
    assert all(s.misconceptions for s in solutions if not s.final_correct)
    # Mostly right, unlike the default domain (wrong three times in four).
    wrong = sum(not s.final_correct for s in solutions) / len(solutions)
    default = build_dataset(200, 8, seed=3, config=DOMAINS["misconceptions"].config).all_solutions()
    assert 0.2 < wrong < 0.45 < sum(not s.final_correct for s in default) / len(default)


def test_an_unknown_held_misconception_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown add_as_multiply \(known: buy_as_containers"):
        DomainConfig(held_misconceptions=("buy_as_containers", "add_as_multiply"))


def test_the_study_command_refuses_an_unknown_held_misconception_before_running(capsys):
    from activelearn.simulation.study import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--domain", "home", "--held-misconceptions", "scale_as_add", "divide_as_add"])
    assert exit_info.value.code == 2
    assert "unknown divide_as_add" in capsys.readouterr().err
