"""Generations from the admin: start one, retry a failed step, close an open one; staff only."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from activelearn.models import GenerationRun
from labeling.models import Generation, GenerationStatus
from tests.labeling.admin_factories import make_staff
from tests.labeling.workflow_factories import make_generation, make_labeler

pytestmark = pytest.mark.django_db
CHANGELIST = "admin:labeling_generation_changelist"


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(make_staff())
    return client


def test_it_offers_a_start_form_with_the_default_config(staff: Client) -> None:
    page = staff.get(reverse("admin:labeling_generation_start"))
    assert page.status_code == 200
    assert b"wrong_share" in page.content  # the default GenerationConfig, as JSON
    assert b"Start a generation" in staff.get(reverse(CHANGELIST)).content


def test_it_starts_a_generation_and_queues_its_first_step_after_commit(
    staff: Client, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as queued:
        response = staff.post(
            reverse("admin:labeling_generation_start"), {"number": "4", "config": '{"k": 5, "base_model": "tiny:bert"}'}
        )

    assert response.status_code == 302
    generation = Generation.objects.get(number=4)
    assert generation.status == GenerationStatus.REQUESTED
    assert GenerationRun.objects.get(generation=generation).config["k"] == 5
    assert len(queued) == 1


def test_it_says_what_is_wrong_with_a_config(staff: Client) -> None:
    response = staff.post(reverse("admin:labeling_generation_start"), {"config": '{"wrong_share": 3}'})

    assert response.status_code == 200
    assert b"wrong_share" in response.content and b"errorlist" in response.content
    assert not Generation.objects.exists()


def test_it_refuses_a_second_running_generation(staff: Client, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        staff.post(reverse("admin:labeling_generation_start"), {"number": "1", "config": '{"base_model": "tiny:bert"}'})
        response = staff.post(
            reverse("admin:labeling_generation_start"), {"number": "2", "config": '{"base_model": "tiny:bert"}'}
        )

    assert response.status_code == 200 and b"errorlist" in response.content
    assert list(Generation.objects.values_list("number", flat=True)) == [1]


def test_it_closes_an_open_generation(staff: Client) -> None:
    generation = make_generation(number=7)

    staff.post(reverse(CHANGELIST), {"action": "close", "index": 0, ACTION_CHECKBOX_NAME: [generation.pk]})

    generation.refresh_from_db()
    assert generation.status == GenerationStatus.CLOSED


def test_retry_explains_when_a_generation_has_not_failed(staff: Client) -> None:
    generation = make_generation(number=8)

    response = staff.post(reverse(CHANGELIST), {"action": "retry", "index": 0, ACTION_CHECKBOX_NAME: [generation.pk]})

    assert [str(m) for m in get_messages(response.wsgi_request)] == ["generation 8: generation 8 is open, not failed"]
    generation.refresh_from_db()
    assert generation.status == GenerationStatus.OPEN


def test_labelers_cannot_start_generations() -> None:
    client = Client()
    labeler = make_labeler()
    assert labeler.user is not None
    client.force_login(labeler.user)

    response = client.post(reverse("admin:labeling_generation_start"), {"config": "{}"})

    assert response.status_code == 302 and "/login/" in response["Location"]
    assert not Generation.objects.exists()
