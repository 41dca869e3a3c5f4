"""Gold items are indistinguishable from normal work on every labeler-facing page.

A QC item is labeled through the real views and every response body (full
pages, htmx fragments, redirects) plus our own static files is scanned for
anything that could tell it apart: gold notes, the words gold/quality/
screening, acceptable-rating markers and kind names. Then the QC task page is
compared with a normal task page after stripping texts and ids.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.urls import reverse

from labeling.models import Assignment, TaskKind
from labeling.work import queue
from tests.labeling.gold_factories import GOLD_NOTE, login, make_qc_pool
from tests.labeling.workflow_factories import STEPS, make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db
HX = {"HX-Request": "true"}

FORBIDDEN = [
    GOLD_NOTE.lower(),
    "goldnote",
    "gold",
    "quality",
    "screening",
    "negative_ok",
    "neutral_ok",
    "positive_ok",
    "acceptable",
    "expected first error",
    "is_quality_control",
    "qc",
    TaskKind.QUALITY_CONTROL.value,
    TaskKind.SCREENING.value,
]


def _scan(body: bytes, where: str) -> None:
    text = body.decode("utf-8", errors="replace")
    # CSRF tokens are random letters and digits: "gold" may turn up in one by chance.
    text = re.sub(r'(csrfmiddlewaretoken" value="|"X-CSRFToken": ")[A-Za-z0-9]+', r"\1", text).lower()
    for word in FORBIDDEN:
        # "qc" as a word only (it appears inside random tokens otherwise).
        hit = re.search(rf"\b{re.escape(word)}\b", text) if word == "qc" else word in text
        assert not hit, f"{word!r} in {where}"


def _label_through_views(client: Client, a: Assignment, *, htmx: bool) -> list[tuple[str, bytes]]:
    extra: dict[str, str] = HX if htmx else {}
    seen = [("task", client.get(reverse("task", args=[a.pk]), headers=extra).content)]
    for index, rating in enumerate([1, 0, -1]):
        url = reverse("rate", args=[a.pk, index, 0])
        response = client.post(url, {"set_rating": rating, "flagged": "0", "version": index + 1}, headers=extra)
        seen.append((f"rate {index}", response.content))
        seen.append((f"rate {index} headers", str(dict(response.items())).encode()))
    seen.append(("task after", client.get(reverse("task", args=[a.pk]), headers=extra).content))
    response = client.post(reverse("submit", args=[a.pk]), headers=extra)
    seen.append(("submit", response.content))
    seen.append(("submit headers", str(dict(response.items())).encode()))
    return seen


@pytest.fixture
def always_qc(settings, monkeypatch):
    settings.QC_RATE = 1.0
    monkeypatch.setattr(queue, "_RNG", random.Random(99))


@pytest.mark.parametrize("htmx", [False, True])
def test_it_leaks_no_gold_while_a_qc_item_is_labeled(always_qc, htmx):
    g = make_generation()
    make_qc_pool(generation=g, size=1)
    make_task(generation=g)
    make_task(generation=g)
    labeler = make_labeler()
    client = login(labeler)
    seen = [("home", client.get(reverse("home")).content), ("guide", client.get(reverse("guide")).content)]
    response = client.post(reverse("next-task"))
    seen.append(("next", response.content))
    seen.append(("next headers", str(dict(response.items())).encode()))
    a = Assignment.objects.get(labeler=labeler)
    assert a.task.kind == TaskKind.QUALITY_CONTROL
    seen += _label_through_views(client, a, htmx=htmx)
    seen.append(("home after", client.get(reverse("home")).content))
    for where, body in seen:
        _scan(body, where)


def test_it_ships_no_gold_markers_in_static_files():
    root = Path(django_settings.BASE_DIR) / "static"
    for path in [*root.glob("js/*.js"), *root.glob("css/*.css")]:
        # The labeler's own status colour (their account, not a task) is fine.
        _scan(path.read_bytes().replace(b".status-failed_screening", b""), str(path))


def _skeleton(body: bytes, texts: list[str]) -> str:
    html = body.decode()
    for text in sorted(texts, key=len, reverse=True):
        html = html.replace(text, "TEXT")
    html = re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "CSRF", html)
    html = re.sub(r'"X-CSRFToken": "[^"]+"', "CSRF", html)
    return re.sub(r"\d+", "N", html)


def test_it_renders_a_qc_task_exactly_like_a_normal_task_apart_from_content(always_qc):
    g = make_generation()
    [qc] = make_qc_pool(generation=g, size=1)
    normal = make_task(generation=g)
    labeler = make_labeler()
    client = login(labeler)
    client.post(reverse("next-task"))
    first = Assignment.objects.get(labeler=labeler)
    assert first.task_id == qc.pk
    qc_page = client.get(reverse("task", args=[first.pk])).content
    qc_fragment = client.get(reverse("task", args=[first.pk]), headers=HX).content
    # Leave the QC item (ratings would differ), then take the normal task.
    client.post(reverse("give-up", args=[first.pk]), {"reason": "test"})
    second = Assignment.objects.get(labeler=labeler, task=normal)
    normal_page = client.get(reverse("task", args=[second.pk])).content
    normal_fragment = client.get(reverse("task", args=[second.pk]), headers=HX).content
    texts = [t.solution.problem.problem for t in (qc, normal)] + STEPS
    assert _skeleton(qc_page, texts) == _skeleton(normal_page, texts)
    assert _skeleton(qc_fragment, texts) == _skeleton(normal_fragment, texts)
