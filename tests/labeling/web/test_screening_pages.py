"""The screening set as the labeler sees it: each task's place in the set, and the result said when it is decided."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from labeling.models import Assignment, AssignmentStatus, LabelerStatus
from labeling.work.rating import step_rate
from tests.labeling.gold_factories import login, make_screening_set
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def _rate_through(assignment: Assignment, ratings: list[int]) -> None:
    for index, rating in enumerate(ratings):
        step_rate(
            assignment_id=assignment.pk, user_id=None, step_index=index, completion_index=0, rating=rating,
            flagged=False, version=index + 1,
        )  # fmt: skip


def _current(client: Client) -> Assignment:
    response = client.post(reverse("next-task"))
    assert response.status_code == 302
    return Assignment.objects.get(pk=int(response["Location"].rstrip("/").rsplit("/", 1)[1]))


@pytest.mark.parametrize(("ratings", "passed"), [([1, 1, -1], True), ([1, 1, 1, 1, 1], False)])
def test_without_javascript_the_submit_that_decides_screening_says_how_it_went(
    settings: Any, ratings: list[int], passed: bool
) -> None:
    settings.SCREENING_SET_SIZE = 2
    make_screening_set(size=2)
    make_task(generation=make_generation(number=5))
    labeler = make_labeler(status=LabelerStatus.SCREENING)
    client = login(labeler)
    for number in (1, 2):
        assignment = _current(client)
        page = client.get(reverse("task", args=[assignment.pk])).content.decode()
        assert f"Screening task {number} of 2" in page
        _rate_through(assignment, ratings)
        response = client.post(reverse("submit", args=[assignment.pk]))
        assert response.status_code == 302
        assert Assignment.objects.get(pk=assignment.pk).status == AssignmentStatus.SUBMITTED

    said = [str(m) for m in get_messages(response.wsgi_request)]
    labeler.refresh_from_db()
    if passed:
        assert labeler.status == LabelerStatus.ACTIVE
        assert said == ["You passed the screening: 2 of 2 of your labels matched the reviewers'. "
                        "Regular work starts now; here is your first task."]  # fmt: skip
        following = client.get(response["Location"]).content.decode()
        assert "Screening task" not in following
    else:
        assert labeler.status == LabelerStatus.FAILED_SCREENING
        assert response["Location"] == reverse("screening-result")
        assert said and "You did not pass the screening: 0 of 2" in said[0]


def test_a_regular_task_says_nothing_of_screening() -> None:
    make_task(generation=make_generation(number=6))
    labeler = make_labeler()
    client = login(labeler)
    assignment = _current(client)
    page = client.get(reverse("task", args=[assignment.pk])).content.decode()
    assert "Screening task" not in page
