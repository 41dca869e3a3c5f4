"""Gold items stay indistinguishable through the API and on every error page.

tests/labeling/web/test_no_gold_leak.py covers the HTML pages, htmx fragments and
our static files; this adds the JSON API flow of a QC item and the bodies of
404/403/400/409/422 answers (HTML and API) given while a QC item is open.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from labeling.models import Assignment, TaskKind
from labeling.work import queue
from tests.labeling.gold_factories import make_qc_pool, make_screening_set
from tests.labeling.web.test_no_gold_leak import _scan
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def always_qc(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.QC_RATE = 1.0
    monkeypatch.setattr(queue, "_RNG", random.Random(99))


def _seen(response: Any, where: str) -> list[tuple[str, bytes]]:
    return [(where, response.content), (f"{where} headers", str(dict(response.items())).encode())]


def test_it_leaks_no_gold_through_the_api_flow_of_a_qc_item(always_qc: None) -> None:
    g = make_generation()
    make_qc_pool(generation=g, size=1)
    make_task(generation=g)
    labeler = make_labeler()
    client = APIClient()
    client.force_authenticate(labeler.user)
    seen = _seen(client.post("/api/tasks/next/"), "next")
    a = Assignment.objects.get(labeler=labeler)
    assert a.task.kind == TaskKind.QUALITY_CONTROL
    url = f"/api/assignments/{a.pk}/"
    seen += _seen(client.get(url), "get")
    for index, rating in enumerate([1, 0, -1]):
        rate = {"step": index, "completion": 0, "rating": rating, "flagged": False, "version": index + 1}
        seen += _seen(client.post(f"{url}ratings/", rate, format="json"), f"rate {index}")
    seen += _seen(client.post(f"{url}ratings/", {"step": 0, "version": 1}, format="json"), "400 rating")
    seen += _seen(client.post(f"{url}ratings/", {"step": 99, "rating": 1, "version": 9}, format="json"), "409 rating")
    seen += _seen(client.post(f"{url}give-up/", {"reason": ""}, format="json"), "400 reason")
    seen += _seen(client.post(f"{url}submit/"), "submit")
    seen += _seen(client.post(f"{url}submit/"), "409 submit")
    seen += _seen(client.get(f"/api/assignments/{a.pk + 100}/"), "404")
    seen += _seen(client.get("/api/problems/"), "403")
    for where, body in seen:
        _scan(body, where)


def test_it_leaks_no_gold_on_html_error_pages(always_qc: None) -> None:
    g = make_generation()
    make_qc_pool(generation=g, size=1)
    make_task(generation=g)
    labeler = make_labeler()
    client = Client()
    client.force_login(labeler.user)
    client.post("/next/")
    a = Assignment.objects.get(labeler=labeler)
    assert a.task.kind == TaskKind.QUALITY_CONTROL
    hx = {"HX-Request": "true"}
    seen = _seen(client.get(f"/assignments/{a.pk + 100}/"), "404")
    seen += _seen(client.post(f"/assignments/{a.pk}/steps/0/0/", {"version": "x"}), "400")
    seen += _seen(client.post(f"/assignments/{a.pk}/steps/0/0/", {"version": "x"}, headers=hx), "400 htmx")
    seen += _seen(client.post(f"/assignments/{a.pk}/steps/99/0/", {"set_rating": "1", "version": "5"}), "409")
    seen += _seen(client.post(f"/assignments/{a.pk}/submit/"), "409 submit")
    seen += _seen(client.post(f"/assignments/{a.pk}/give-up/", {"reason": ""}), "422")
    seen += _seen(client.post(f"/assignments/{a.pk}/give-up/", {"reason": ""}, headers=hx), "422 htmx")
    seen += _seen(client.get(f"/assignments/{a.pk}/steps/0/0/"), "405")
    seen += _seen(client.get("/dashboard/"), "staff only")
    for where, body in seen:
        _scan(body, where)


def test_it_tells_a_labeler_in_screening_nothing_about_the_items(settings: Any) -> None:
    settings.SCREENING_SET_SIZE = 1
    make_screening_set(size=1)
    labeler = make_labeler(status="screening")
    client = APIClient()
    client.force_authenticate(labeler.user)
    seen = _seen(client.post("/api/tasks/next/"), "next")
    a = Assignment.objects.get(labeler=labeler)
    seen += _seen(client.get(f"/api/assignments/{a.pk}/"), "get")
    for where, body in seen:
        _scan(body, where)
