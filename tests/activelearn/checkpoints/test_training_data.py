from typing import Any

import pytest

from activelearn.checkpoints.training_data import TrainingDataFilters, labeled_solutions_list, training_set_build
from activelearn.prm.data import LabeledStep, RatedCompletion, build_examples, split_by_problem
from activelearn.prm.modeling import NEGATIVE, NEUTRAL, POSITIVE
from labeling.models import FinishReason, LabelerStatus, TaskKind
from tests.activelearn.label_factories import Built, Step, keyword_labels, labeled, labeler

pytestmark = pytest.mark.django_db

GOOD = Step(completions=[("a good step", 1)])


def _problem_ids(**filters: Any) -> list[str]:
    return sorted(s.problem_id for s in labeled_solutions_list(filters=TrainingDataFilters(**filters)))


def test_it_leaves_out_quality_control_screening_unfinished_and_excluded_labelers_by_default():
    kept = labeled([GOOD])
    qc = labeled([GOOD], kind=TaskKind.QUALITY_CONTROL)
    screening = labeled([GOOD], kind=TaskKind.SCREENING, generation_number=-1)
    gave_up = labeled([GOOD], finish_reason=FinishReason.GIVE_UP)
    bad_problem = labeled([GOOD], finish_reason=FinishReason.BAD_PROBLEM)
    excluded = labeled([GOOD], by=labeler(exclude_labels=True))
    suspended = labeled([GOOD], by=labeler(status=LabelerStatus.SUSPENDED))

    def ids(*built: Built) -> list[str]:
        return sorted(b.problem.unique_id for b in built)

    assert _problem_ids() == ids(kept)
    assert _problem_ids(include_quality_control=True) == ids(kept, qc)
    assert _problem_ids(include_screening=True) == ids(kept, screening)
    assert _problem_ids(include_unfinished=True) == ids(kept, gave_up, bad_problem)
    assert _problem_ids(include_excluded_labelers=True) == ids(kept, excluded)
    assert _problem_ids(include_suspended_labelers=True) == ids(kept, suspended)


def test_it_carries_alternatives_skips_unrated_completions_and_stops_at_the_error_step():
    built = labeled(
        [
            Step(completions=[("first", 1)], chosen=0),
            Step(completions=[("shown", -1), ("alt one", 1), ("alt unrated", None), ("alt two", 0)], chosen=None),
        ]
    )
    (solution,) = labeled_solutions_list()
    assert solution.problem_id == built.problem.unique_id and solution.problem == built.problem.problem
    assert solution.steps == (
        LabeledStep(completions=(RatedCompletion("first", 1),), chosen=0),
        LabeledStep(
            completions=(RatedCompletion("shown", -1), RatedCompletion("alt one", 1), RatedCompletion("alt two", 0)),
            chosen=None,
        ),
    )


def test_it_makes_a_phase_1_human_step_a_chosen_positive_completion_and_reindexes_chosen():
    labeled(
        [
            Step(completions=[("cand a", None), ("cand b", 1)], chosen=1),
            Step(completions=[("cand c", -1), ("cand d", -1)], chosen=None, human="my own step"),
            Step(completions=[("last", 1)], chosen=0),
        ],
        generation_number=None,
        finish_reason=FinishReason.SOLUTION,
    )
    (solution,) = labeled_solutions_list()
    assert [step.chosen for step in solution.steps] == [0, 2, 0]
    assert solution.steps[0].completions == (RatedCompletion("cand b", 1),)
    assert solution.steps[1].completions[2] == RatedCompletion("my own step", 1)
    assert len(build_examples([solution])[0].steps) == 3  # the chain goes on past the human step


def test_it_stops_a_trajectory_whose_chosen_completion_is_unrated():
    labeled([GOOD, Step(completions=[("unrated", None)], chosen=0), GOOD])
    (solution,) = labeled_solutions_list()
    assert len(solution.steps) == 1


@pytest.mark.parametrize(("neutral", "expected"), [("own", NEUTRAL), ("positive", POSITIVE), ("negative", NEGATIVE)])
def test_it_applies_the_neutral_handling_it_is_given(neutral, expected):
    labeled([Step(completions=[("meh", 0)]), GOOD], finish_reason=FinishReason.SOLUTION)
    training_set = training_set_build(neutral=neutral, val_fraction=0.0)
    (example,) = build_examples(training_set.train, training_set.neutral)
    assert example.labels == (expected, POSITIVE)


def test_it_limits_labels_to_a_generation_and_keeps_phase_1():
    built = {number: labeled([GOOD], generation_number=number) for number in (None, 0, 1, 2)}

    def ids(*numbers: int | None) -> list[str]:
        return sorted(built[n].problem.unique_id for n in numbers)

    assert _problem_ids(through_generation=1) == ids(None, 0, 1)
    assert _problem_ids(through_generation=0) == ids(None, 0)
    assert _problem_ids() == ids(None, 0, 1, 2)
    assert _problem_ids(generations=(2,)) == ids(2)


def test_it_splits_by_problem_deterministically():
    keyword_labels(30, seed=4)
    first = training_set_build(val_fraction=0.3)
    second = training_set_build(val_fraction=0.3)
    assert first.train == second.train and first.validation == second.validation
    assert first.validation and first.train
    assert not {s.problem_id for s in first.train} & {s.problem_id for s in first.validation}
    assert (first.train, first.validation) == split_by_problem(labeled_solutions_list(), 0.3)


def test_it_reads_any_number_of_assignments_in_two_queries(django_assert_num_queries):
    keyword_labels(25, seed=5, steps=4)
    labeled([Step(completions=[("shown", -1), ("alt", 1)], chosen=None)])
    with django_assert_num_queries(2):
        solutions = labeled_solutions_list()
    assert len(solutions) == 26


def test_it_pages_through_assignments(monkeypatch, django_assert_num_queries):
    monkeypatch.setattr("activelearn.checkpoints.training_data.CHUNK", 4)
    keyword_labels(9, seed=6)
    # three pages of 4, 4, 1: two queries each, the short last page ends the loop
    with django_assert_num_queries(6):
        assert len(labeled_solutions_list()) == 9
