"""Key presses (POST assignments/<id>/presses/): applied in order to exactly the step they were aimed at, or refused."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labeling.models import Assignment, AssignmentStatus, StepRating
from labeling.work.rating import Press, presses_apply, step_rate
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def _started(**task_kwargs: Any) -> tuple[Client, Assignment]:
    make_task(generation=make_generation(), **task_kwargs)
    labeler = make_labeler()
    client = Client()
    client.force_login(labeler.user)
    assert client.post(reverse("next-task")).status_code == 302
    return client, Assignment.objects.get(labeler=labeler)


def _press(client: Client, a: Assignment, *presses: dict[str, Any]) -> Any:
    return client.post(
        reverse("presses", args=[a.pk]), json.dumps({"presses": list(presses)}), content_type="application/json"
    )


def _stored(a: Assignment) -> dict[tuple[int, int], tuple[int | None, bool]]:
    rows = StepRating.objects.filter(step__assignment=a).values_list(
        "step__index", "completion_index", "rating", "flagged"
    )
    return {(i, c): (r, bool(f)) for i, c, r, f in rows}


def test_a_batch_is_applied_in_order_each_press_to_its_own_step():
    client, a = _started()
    response = _press(
        client,
        a,
        {"step": 0, "completion": 0, "version": 0, "rating": 1},
        {"step": 1, "completion": 0, "version": 1, "rating": 0},
        {"step": 1, "completion": 0, "version": 2, "flag": True},
        {"step": 0, "completion": 0, "version": 3, "rating": 0},
        {"step": 2, "completion": 0, "version": 4, "rating": 1},
    )
    assert response.status_code == 200
    body = response.json()
    assert body["applied"] == 5 and body["refused"] is None
    assert body["version"] == 5
    assert body["current"] == "c-3-0"
    assert 'id="finish-box"' in body["finish_box"] and 'id="finish"' not in body["finish_box"]
    # The flag kept step 2's rating; the re-rating of step 1 kept its (absent) flag.
    assert _stored(a) == {(0, 0): (0, False), (1, 0): (0, True), (2, 0): (1, False)}
    a.refresh_from_db()
    assert a.version == 5


def test_a_press_from_a_tab_that_is_behind_is_refused_with_the_rest_of_its_batch():
    client, a = _started()
    assert _press(client, a, {"step": 0, "completion": 0, "version": 0, "rating": 1}).status_code == 200
    # Another tab, still showing version 0, presses 2 on step 1 and then 3 on step 2.
    response = _press(
        client,
        a,
        {"step": 0, "completion": 0, "version": 0, "rating": 0},
        {"step": 1, "completion": 0, "version": 1, "rating": 1},
    )
    assert response.status_code == 409
    body = response.json()
    assert body["applied"] == 0 and body["refused"] == "stale"
    assert "another tab" in body["message"]
    assert body["version"] == 1 and body["current"] == "c-1-0"
    assert _stored(a) == {(0, 0): (1, False)}


def test_the_presses_before_a_refused_one_are_stored_and_the_answer_says_how_many():
    client, a = _started()
    response = _press(
        client,
        a,
        {"step": 0, "completion": 0, "version": 0, "rating": 1},
        {"step": 3, "completion": 0, "version": 1, "rating": 1},  # not reached yet
        {"step": 1, "completion": 0, "version": 2, "rating": 1},
    )
    assert response.status_code == 409
    body = response.json()
    assert (body["applied"], body["refused"], body["version"]) == (1, "rejected", 1)
    assert "not reached" in body["message"]
    assert _stored(a) == {(0, 0): (1, False)}


def test_a_press_that_ends_the_solution_says_it_reshaped_it():
    client, a = _started(alternatives={1: ["Alternative A"]})
    presses = [{"step": i, "completion": 0, "version": i, "rating": 1} for i in range(3)]
    presses.append({"step": 1, "completion": 0, "version": 3, "rating": -1})
    body = _press(client, a, *presses).json()
    assert body["applied"] == 4 and body["reshaped"] is True
    assert body["current"] == "c-1-1"
    assert _stored(a) == {(0, 0): (1, False), (1, 0): (-1, False), (1, 1): (None, False)}


def test_unreadable_presses_are_refused_and_nothing_is_stored():
    client, a = _started()
    url = reverse("presses", args=[a.pk])
    for body in [
        "not json",
        json.dumps({"presses": []}),
        json.dumps({"presses": [{"step": 0, "completion": 0, "version": 0}]}),
        json.dumps({"presses": [{"step": 0, "completion": 0, "version": 0, "rating": 2}]}),
        json.dumps({"presses": [{"step": 0, "completion": 0, "version": 0, "rating": True}]}),
        json.dumps({"presses": [{"step": "0", "completion": 0, "version": 0, "rating": 1}]}),
        json.dumps({"presses": [{"step": 0, "completion": 0, "version": 0, "rating": 1, "flag": True}]}),
        json.dumps({"presses": [{"step": 0, "completion": 0, "version": 0, "flag": 1}]}),
    ]:
        response = client.post(url, body, content_type="application/json")
        assert response.status_code == 400, body
        assert response.json()["error"]
    too_many = [{"step": 0, "completion": 0, "version": v, "rating": 1} for v in range(101)]
    assert _press(client, a, *too_many).status_code == 400
    assert _stored(a) == {}


def test_someone_elses_assignment_answers_404_and_a_submitted_one_409():
    client, a = _started()
    other = Client()
    other.force_login(make_labeler().user)
    press = {"step": 0, "completion": 0, "version": 0, "rating": 1}
    assert _press(other, a, press).status_code == 404
    assert other.post(reverse("presses", args=[a.pk]), "x", content_type="application/json").status_code == 404
    Assignment.objects.filter(pk=a.pk).update(status=AssignmentStatus.SUBMITTED, finish_reason="solution")
    response = _press(client, a, press)
    assert response.status_code == 409
    assert response.json()["refused"] == "closed"
    assert _stored(a) == {}


def test_submit_from_a_page_that_showed_an_older_state_is_refused():
    client, a = _started(steps=["Only step."])
    _press(client, a, {"step": 0, "completion": 0, "version": 0, "rating": 1})
    _press(client, a, {"step": 0, "completion": 0, "version": 1, "rating": 0})
    response = client.post(reverse("submit", args=[a.pk]), {"version": "1"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 409
    assert "changed in another tab" in response.content.decode()
    a.refresh_from_db()
    assert a.status == AssignmentStatus.IN_PROGRESS
    assert client.post(reverse("submit", args=[a.pk]), {"version": "2"}).status_code == 302
    a.refresh_from_db()
    assert a.status == AssignmentStatus.SUBMITTED
    assert a.version == 3  # the finish is a change of state too


def test_a_click_without_js_moves_the_state_version_past_its_own():
    _client, a = _started()
    rated = step_rate(assignment_id=a.pk, user_id=None, step_index=0, completion_index=0, rating=1, flagged=False,
                      version=7)  # fmt: skip
    assert rated.assignment.version == 7
    # A press aimed at the state after it applies, and is stored over the click.
    outcome = presses_apply(assignment_id=a.pk, user_id=None, presses=[Press(0, 0, version=7, rating=0)])
    assert (outcome.applied, outcome.refusal, outcome.assignment.version) == (1, None, 8)
    assert _stored(a) == {(0, 0): (0, False)}


def test_a_press_is_stored_in_a_fixed_number_of_queries(django_assert_num_queries):
    client, a = _started()
    _press(client, a, {"step": 0, "completion": 0, "version": 0, "rating": 1})
    if connection.vendor == "postgresql":
        # The session and the press's one statement (PRESS_PLAIN): the user
        # is checked in it, not loaded (this process verified the session
        # when the task was handed out).
        with django_assert_num_queries(2):
            assert _press(client, a, {"step": 1, "completion": 0, "version": 1, "rating": 1}).status_code == 200
    else:
        # session, user; BEGIN, the assignment locked with its task and steps
        # (and the owner checked), ratings, new LabeledStep, upsert, previous
        # step's chosen_completion, assignment time, lease and version,
        # COMMIT. The answer (the finish box) needs none.
        with django_assert_num_queries(10):
            assert _press(client, a, {"step": 1, "completion": 0, "version": 1, "rating": 1}).status_code == 200
    # A batch adds its presses' writes only (7 queries for a batch, then a
    # re-rating is one upsert; a new step its LabeledStep, upsert and the
    # previous step's chosen_completion).
    with django_assert_num_queries(7 + 1 + 3):
        _press(
            client,
            a,
            {"step": 1, "completion": 0, "version": 2, "rating": 0},
            {"step": 2, "completion": 0, "version": 3, "rating": 1},
        )


def _masked(body: dict[str, Any], a: Assignment) -> dict[str, Any]:
    # A form's CSRF token is masked afresh for every answer; the twins' URLs name their own assignments.
    box = re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", body["finish_box"])
    return {**body, "finish_box": box.replace(f"/assignments/{a.pk}/", "/assignments/A/")}


def test_a_plain_press_answers_what_the_full_rules_answer(monkeypatch):
    # One labeler's presses may take the one-statement path (PostgreSQL, a
    # session this process verified); the other's are made to go the usual
    # way every time. Same steps, same presses: the same answers.
    steps = ["One.", "Two.", "Three."]
    fast, a = _started(steps=steps)
    usual, b = _started(steps=steps)
    presses = [
        {"step": 0, "completion": 0, "version": 0, "rating": 1},
        {"step": 1, "completion": 0, "version": 1, "rating": 0},
        {"step": 1, "completion": 0, "version": 2, "flag": True},
        {"step": 2, "completion": 0, "version": 3, "rating": 1},  # the last step: the submit box
        {"step": 0, "completion": 0, "version": 4, "rating": 0},
        {"step": 2, "completion": 0, "version": 5, "rating": -1},  # a -1 on a rated step: Python's
    ]
    for i, press in enumerate(presses):
        with monkeypatch.context() as usual_way:
            usual_way.setattr("labeling.web.views.session_user", lambda request: None)
            expected = _press(usual, b, press)
        with CaptureQueriesContext(connection) as queries:
            got = _press(fast, a, press)
        assert got.status_code == expected.status_code == 200
        assert _masked(got.json(), a) == _masked(expected.json(), b), press
        if connection.vendor == "postgresql" and i < len(presses) - 1:
            assert len(queries) == 2, press  # the session and the press's one statement
    assert _stored(a) == _stored(b)


USER_CHANGES = ["password", "deactivated"]


def _change_user(a: Assignment, change: str) -> None:
    # Done elsewhere (the admin, another session) after this process verified the labeler's session.
    user = a.labeler.user
    if change == "password":
        user.set_password("another-password-2")
    else:
        user.is_active = False
    user.save()


@pytest.mark.parametrize("change", USER_CHANGES)
def test_a_press_of_a_session_whose_user_changed_is_not_stored_and_is_sent_to_sign_in(change):
    client, a = _started()
    _press(client, a, {"step": 0, "completion": 0, "version": 0, "rating": 1})
    _change_user(a, change)
    response = _press(client, a, {"step": 1, "completion": 0, "version": 1, "rating": 1})
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert _stored(a) == {(0, 0): (1, False)}


def test_the_task_page_is_not_kept_for_back_and_its_text_is_bidi_safe():
    client, a = _started(steps=["\u202eevil", "Two."])
    response = client.get(reverse("task", args=[a.pk]))
    assert "no-store" in response["Cache-Control"]
    body = response.content.decode()
    assert "{#" not in body  # no template comment leaks onto the page
    assert "\u202e" not in body
    assert '<bdi><span class="ctl" title="RIGHT-TO-LEFT OVERRIDE">\u27e8U+202E\u27e9</span>evil</bdi>' in body
    htmx = client.get(reverse("task", args=[a.pk]), HTTP_HX_REQUEST="true")
    assert "no-store" in htmx["Cache-Control"]
    assert "<html" not in htmx.content.decode()
    restore = client.get(reverse("task", args=[a.pk]), HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    assert "<html" in restore.content.decode()  # Back restores a whole page, never a fragment


@pytest.mark.parametrize("change", USER_CHANGES)
def test_a_submit_of_a_session_whose_user_changed_stores_nothing_and_is_sent_to_sign_in(change):
    client, a = _started(steps=["One."])
    assert _press(client, a, {"step": 0, "completion": 0, "version": 0, "rating": 1}).status_code == 200
    _change_user(a, change)
    response = client.post(reverse("submit", args=[a.pk]), {"version": "1"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    a.refresh_from_db()
    assert a.status == AssignmentStatus.IN_PROGRESS and a.version == 1
