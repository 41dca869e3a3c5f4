"""Server-owned fields sent by a labeler (form posts and API JSON) are ignored or rejected; stored values stay."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from labeling.models import Assignment, FinishReason, StepRating, Task
from labeling.work.assignment import MAX_VERSION
from tests.labeling.workflow_factories import STEPS
from tests.security.conftest import World

pytestmark = pytest.mark.django_db

SERVER_OWNED: dict[str, Any] = {
    "labeler": 999,
    "labeler_id": 999,
    "assignment": 999,
    "task": 999,
    "generation": 999,
    "kind": "quality_control",
    "is_quality_control": True,
    "is_gold": True,
    "negative_ok": True,
    "lease_expires_at": "2099-01-01T00:00:00Z",
    "priority": 1e9,
    "verifier_score": 1.0,
    "score": 1.0,
    "status": "submitted",
    "finish_reason": "found_error",
    "total_time_ms": 1,
    "text": "not the step",
    "updated_at": "2099-01-01T00:00:00Z",
    "ratings_reset_version": 0,
}


def _state(world: World) -> tuple[Any, ...]:
    a = Assignment.objects.get(pk=world.a_assignment.pk)
    t = Task.objects.get(pk=a.task_id)
    # A rating renews the lease and adds working time: the server's values, never the client's.
    assert a.lease_expires_at is None or a.lease_expires_at.year < 2099
    assert a.total_time_ms != 1
    return (
        a.labeler_id, a.status, a.finish_reason, a.task_id,
        t.kind, t.is_quality_control, t.priority, t.verifier_score, t.generation_id, t.status,
    )  # fmt: skip


def _api(world: World) -> APIClient:
    client = APIClient()
    client.force_authenticate(world.a.user)
    return client


def test_it_ignores_server_owned_fields_in_an_api_rating(world: World) -> None:
    before = _state(world)
    body = {**SERVER_OWNED, "step": 0, "completion": 0, "rating": 1, "flagged": False, "version": 1}
    response = _api(world).post(f"/api/assignments/{world.a_assignment.pk}/ratings/", body, format="json")
    assert response.status_code == 200
    assert _state(world) == before
    stored = StepRating.objects.get(step__assignment=world.a_assignment, step__index=0, completion_index=0)
    assert (stored.rating, stored.text, stored.version) == (1, STEPS[0], 1)


def test_it_ignores_server_owned_fields_in_a_form_rating(world: World) -> None:
    client = Client()
    client.force_login(world.a.user)
    before = _state(world)
    body = {**SERVER_OWNED, "set_rating": "1", "flagged": "0", "version": "1"}
    client.post(f"/assignments/{world.a_assignment.pk}/steps/0/0/", body)
    assert _state(world) == before
    stored = StepRating.objects.get(step__assignment=world.a_assignment, step__index=0, completion_index=0)
    assert (stored.rating, stored.text) == (1, STEPS[0])


@pytest.mark.parametrize("version", [0, -1, MAX_VERSION + 1, "1e9", "2.5", None, [], {"gt": 1}])
def test_it_rejects_version_tricks(world: World, version: Any) -> None:
    body = {"step": 0, "completion": 0, "rating": 1, "flagged": False, "version": version}
    response = _api(world).post(f"/api/assignments/{world.a_assignment.pk}/ratings/", body, format="json")
    assert response.status_code == 400
    assert not StepRating.objects.filter(step__assignment=world.a_assignment, rating__isnull=False).exists()


@pytest.mark.parametrize("rating", [2, -2, "1; DROP TABLE", 0.5, True])
def test_it_rejects_ratings_outside_minus_one_to_one(world: World, rating: Any) -> None:
    body = {"step": 0, "completion": 0, "rating": rating, "flagged": False, "version": 1}
    response = _api(world).post(f"/api/assignments/{world.a_assignment.pk}/ratings/", body, format="json")
    assert response.status_code in (400, 409)
    assert not StepRating.objects.filter(step__assignment=world.a_assignment, rating__isnull=False).exists()


@pytest.mark.parametrize("kind", ["give-up", "bad-problem"])
def test_it_takes_the_finish_reason_from_the_route_not_the_body(world: World, kind: str) -> None:
    body = {**SERVER_OWNED, "reason": "stuck"}
    response = _api(world).post(f"/api/assignments/{world.a_assignment.pk}/{kind}/", body, format="json")
    assert response.status_code == 200
    a = Assignment.objects.get(pk=world.a_assignment.pk)
    assert a.finish_reason == (FinishReason.GIVE_UP if kind == "give-up" else FinishReason.BAD_PROBLEM)
    assert a.labeler_id == world.a.pk
    assert a.total_time_ms != 1


def test_it_ignores_a_body_on_submit(world: World) -> None:
    before = _state(world)
    response = _api(world).post(f"/api/assignments/{world.a_assignment.pk}/submit/", SERVER_OWNED, format="json")
    assert response.status_code == 409  # nothing rated yet: not finished, whatever the body says
    assert _state(world) == before


def test_it_ignores_server_owned_fields_on_the_form_give_up(world: World) -> None:
    client = Client()
    client.force_login(world.a.user)
    client.post(f"/assignments/{world.a_assignment.pk}/give-up/", {**SERVER_OWNED, "reason": "stuck"})
    a = Assignment.objects.get(pk=world.a_assignment.pk)
    assert (a.finish_reason, a.labeler_id) == (FinishReason.GIVE_UP, world.a.pk)


def test_it_stores_one_row_for_the_same_api_rating_sent_twice(world: World) -> None:
    url = f"/api/assignments/{world.a_assignment.pk}/ratings/"
    body = {"step": 0, "completion": 0, "rating": 1, "flagged": False, "version": 3}
    first = _api(world).post(url, body, format="json")
    second = _api(world).post(url, body, format="json")
    assert first.json()["applied"] is True and second.json()["applied"] is False
    assert (
        StepRating.objects.filter(step__assignment=world.a_assignment, step__index=0, completion_index=0).count() == 1
    )


def test_it_never_lets_a_stale_api_rating_overwrite_a_newer_one(world: World) -> None:
    url = f"/api/assignments/{world.a_assignment.pk}/ratings/"
    newer = {"step": 0, "completion": 0, "rating": -1, "flagged": True, "version": 7}
    older = {"step": 0, "completion": 0, "rating": 1, "flagged": False, "version": 6}
    assert _api(world).post(url, newer, format="json").json()["applied"] is True
    assert _api(world).post(url, older, format="json").json()["applied"] is False
    stored = StepRating.objects.get(step__assignment=world.a_assignment, step__index=0, completion_index=0)
    assert (stored.rating, stored.flagged, stored.version) == (-1, True, 7)
