from activelearn.prm.data import (
    LabeledSolution,
    LabeledStep,
    RatedCompletion,
    StepExample,
    build_examples,
    is_validation_problem,
    solution_examples,
    split_by_problem,
)
from activelearn.prm.modeling import NEGATIVE, NEUTRAL, POSITIVE


def _solution() -> LabeledSolution:
    return LabeledSolution(
        problem_id="p1",
        problem="Compute 2+3.",
        steps=(
            LabeledStep((RatedCompletion("2+3=5", 1), RatedCompletion("2+3=6", -1)), chosen=0),
            LabeledStep((RatedCompletion("It is odd.", 0),), chosen=0),
            LabeledStep((RatedCompletion("So 6.", -1), RatedCompletion("So 5.", 1)), chosen=None),
        ),
    )


def test_chosen_path_is_one_sequence_and_alternatives_share_its_prefix():
    examples = solution_examples(_solution(), "own")
    assert examples == [
        StepExample("p1", "Compute 2+3.", ("2+3=5", "It is odd."), (POSITIVE, NEUTRAL)),
        StepExample("p1", "Compute 2+3.", ("2+3=6",), (NEGATIVE,)),
        StepExample("p1", "Compute 2+3.", ("2+3=5", "It is odd.", "So 6."), (None, None, NEGATIVE)),
        StepExample("p1", "Compute 2+3.", ("2+3=5", "It is odd.", "So 5."), (None, None, POSITIVE)),
    ]


def test_neutral_handling_maps_zero_ratings():
    assert build_examples([_solution()], "positive")[0].labels == (POSITIVE, POSITIVE)
    assert build_examples([_solution()], "negative")[0].labels == (POSITIVE, NEGATIVE)


def test_split_is_by_problem_deterministic_and_disjoint():
    items = [StepExample(f"q{i % 50}", "p", ("s",), (POSITIVE,)) for i in range(500)]
    train, validation = split_by_problem(items, 0.2)
    assert {e.problem_id for e in train}.isdisjoint({e.problem_id for e in validation})
    assert 3 <= len({e.problem_id for e in validation}) <= 20
    assert split_by_problem(items, 0.2) == (train, validation)
    assert is_validation_problem("q1", 1.0) and not is_validation_problem("q1", 0.0)
