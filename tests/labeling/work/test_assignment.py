"""labeling.work.assignment: whose assignment it is, and which phase it belongs to."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, User

from labeling.models import Assignment, AssignmentStatus, Labeler, LabelerStatus
from labeling.work.assignment import AssignmentNotFound, assignment_for_labeler, is_phase_one
from labeling.work.queue import assignment_next
from tests.labeling.work.test_phase_one import make_phase_one_task
from tests.labeling.workflow_factories import make_assignment, make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def _leased() -> Assignment:
    make_task(generation=make_generation())
    assignment = assignment_next(labeler=make_labeler())
    assert assignment is not None
    return assignment


def test_it_finds_the_labelers_own_assignment_with_its_task_solution_and_problem(django_assert_num_queries):
    mine = _leased()
    with django_assert_num_queries(1):
        found = assignment_for_labeler(user=mine.labeler.user, pk=mine.pk)
        assert found.task.solution.problem.problem
    assert found == mine


def test_another_labelers_assignment_is_not_found_like_a_missing_one():
    mine = _leased()
    other = make_labeler()
    with pytest.raises(AssignmentNotFound):
        assignment_for_labeler(user=other.user, pk=mine.pk)
    with pytest.raises(AssignmentNotFound):
        assignment_for_labeler(user=mine.labeler.user, pk=mine.pk + 1000)


def test_a_user_without_an_id_finds_no_assignment_of_a_labeler_without_a_user():
    # Labelers imported from the release have no user.
    imported = Labeler.objects.create(status=LabelerStatus.ACTIVE)
    task = make_task(generation=make_generation())
    assignment = make_assignment(task, labeler=imported, status=AssignmentStatus.IN_PROGRESS)
    for user in (AnonymousUser(), User(username="unsaved")):
        with pytest.raises(AssignmentNotFound):
            assignment_for_labeler(user=user, pk=assignment.pk)


def test_phase_one_is_a_task_on_the_placeholder_solution_without_steps():
    phase_two = _leased()
    phase_one = make_assignment(make_phase_one_task(), labeler=make_labeler())
    assert not is_phase_one(phase_two)
    assert is_phase_one(phase_one)
