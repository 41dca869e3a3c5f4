"""The task page's state version belongs to the ratings it shows, however the page's reads and a press interleave."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from labeling.models import Assignment
from labeling.web import respond
from labeling.work.alternatives import alternatives_generated_attach
from labeling.work.rating import Press, presses_apply
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def test_a_press_stored_while_the_page_is_read_is_shown_with_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    make_task(generation=make_generation())
    labeler = make_labeler()
    client = Client()
    client.force_login(labeler.user)
    assert client.post(reverse("next-task")).status_code == 302
    assignment = Assignment.objects.get(labeler=labeler)
    assert labeler.user is not None
    user_id = labeler.user.pk

    # The page has read the assignment (its ownership check); the press of the
    # page that was just left lands before the page reads the ratings.
    attach = alternatives_generated_attach

    def a_press_lands_meanwhile(*, assignment: Assignment) -> bool:
        press = Press(step_index=0, completion_index=0, version=assignment.version, rating=1)
        assert presses_apply(assignment_id=assignment.pk, user_id=user_id, presses=[press]).applied == 1
        return attach(assignment=assignment)

    monkeypatch.setattr(respond, "alternatives_generated_attach", a_press_lands_meanwhile)
    html = client.get(reverse("task", args=[assignment.pk])).content.decode()

    stored = Assignment.objects.get(pk=assignment.pk).version
    shown = re.search(r'id="task-state"[^>]*data-version="(\d+)"', html)
    assert shown is not None and int(shown.group(1)) == stored
    assert re.search(r'id="c-0-0"[^>]*>', html) and 'class="completion r-good' in html
    # The next press, aimed at the version the page shows, is stored.
    answer = client.post(
        reverse("presses", args=[assignment.pk]),
        json.dumps({"presses": [{"step": 1, "completion": 0, "version": stored, "rating": 0}]}),
        content_type="application/json",
    )
    assert answer.status_code == 200 and answer.json()["applied"] == 1
