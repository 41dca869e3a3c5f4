import re

import pytest

from activelearn.simulation.domain import DomainConfig, apply, build_dataset, generate_problems

EXPRESSION = re.compile(r"(-?\d+) ([-+*]) (-?\d+) = (-?\d+)")


@pytest.fixture(scope="module")
def dataset():
    return build_dataset(80, 12, seed=5, config=DomainConfig(max_events=4, later_error_rate=0.3))


def test_every_steps_truth_equals_a_recomputation_from_its_text(dataset):
    for problem in dataset.problems:
        for solution in dataset.solutions[problem.problem_id]:
            written: list[int] = []  # results as written, by plan step (a skipped step keeps the true value)
            for step in solution.steps:
                if step.kind == "filler":
                    assert step.is_correct and not EXPRESSION.search(step.text)
                    continue
                if step.kind == "answer":
                    assert step.text.startswith("# Answer\n\n")
                    shown = int(step.text.split("\n\n")[1])
                    assert step.is_correct == (shown == step.expected_value)
                    continue
                match = EXPRESSION.search(step.text)
                assert match is not None and step.written is not None
                left, operator, right, result = match.groups()
                assert (int(left), operator, int(right), int(result)) == (
                    step.written.left,
                    step.written.operator,
                    step.written.right,
                    step.written.result,
                )
                # The text's own arithmetic is only ever wrong for an arithmetic slip.
                holds = apply(operator, int(left), int(right)) == int(result)
                assert holds or step.error == "arithmetic"
                assert step.is_correct == (step.error is None)
                written.append(int(result))


def test_the_first_error_is_the_first_step_that_is_not_correct(dataset):
    for solution in dataset.all_solutions():
        wrong = [i for i, step in enumerate(solution.steps) if not step.is_correct]
        assert solution.first_error == (wrong[0] if wrong else None)


def test_error_free_solutions_reach_the_reference_answer_and_wrong_answers_have_an_error(dataset):
    answers = {p.problem_id: p.answer for p in dataset.problems}
    for solution in dataset.all_solutions():
        assert solution.final_correct == (solution.answer == str(answers[solution.problem_id]))
        if solution.first_error is None:
            assert solution.final_correct
        if not solution.final_correct:
            assert solution.first_error is not None


def test_errors_propagate_later_steps_compute_from_the_written_values(dataset):
    propagated = 0
    for solution in dataset.all_solutions():
        if solution.first_error is None:
            continue
        steps = solution.steps
        wrong_value = steps[solution.first_error].value
        later = [s for s in steps[solution.first_error + 1 :] if s.kind == "compute" and s.is_correct]
        # A correct later step that uses the wrong value carries it on, so the answer is wrong.
        if later and wrong_value is not None and wrong_value in (later[0].written.left, later[0].written.right):
            propagated += 1
    assert propagated > 50


def test_the_error_mix_covers_every_kind_and_both_subtleties(dataset):
    kinds = {step.error for s in dataset.all_solutions() for step in s.steps if step.error}
    assert kinds == {"arithmetic", "wrong_operation", "copied_wrong_number", "skipped_step"}
    subtleties = {s.subtle for s in dataset.all_solutions() if s.first_error is not None}
    assert subtleties == {True, False}


def test_generation_is_deterministic_given_the_seed():
    first = build_dataset(10, 4, seed=3)
    again = build_dataset(10, 4, seed=3)
    other = build_dataset(10, 4, seed=4)
    assert first == again
    assert first.problems != other.problems


def test_the_difficulty_knobs_change_the_data():
    clean = build_dataset(40, 8, seed=1, config=DomainConfig(solution_error_rate=0.0, filler_rate=0.0))
    assert all(s.first_error is None and s.final_correct for s in clean.all_solutions())
    assert all(s.kind != "filler" for sol in clean.all_solutions() for s in sol.steps)
    long = build_dataset(40, 2, seed=1, config=DomainConfig(min_events=4, max_events=4))
    assert min(len(p.plan) for p in long.problems) >= 5


def test_pool_held_out_and_pretraining_problems_of_one_seed_are_different_problems():
    texts = {prefix: {p.text for p in generate_problems(50, seed=0, prefix=prefix)} for prefix in ("train", "eval")}
    assert len(texts["train"] & texts["eval"]) <= 1  # independent draws; a rare collision is allowed
