"""The active-learning loop in a real browser: the admin starts a generation in the admin, a
real Celery worker trains, scores, grades and selects, the labeler's next task is the most
convincing selected solution, and the dashboard shows generation 1 and its checkpoint."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from labeling.models import Assignment, Generation, GenerationStatus, Task, TaskKind
from tests.activelearn.generations.test_pipeline_worker import queue, start_worker  # noqa: F401 (fixtures)
from tests.activelearn.pipeline_factories import config, labels, pool
from tests.labeling.admin_factories import make_staff
from tests.labeling.workflow_factories import make_generation, make_labeler

pytestmark = [pytest.mark.browser, pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]

# Refreshed on request only (UPDATE_DOCS_SCREENSHOTS=1), so a test run leaves the tree as it was.
DOCS = Path(__file__).resolve().parents[2] / "docs" / "img"


def _sign_in(page, url: str, username: str) -> None:
    page.goto(url + "/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", "pw-for-tests-1")
    page.click("button[type=submit]")


def _screenshot(page, name: str, tmp_path: Path) -> None:
    target = DOCS / name if os.environ.get("UPDATE_DOCS_SCREENSHOTS") == "1" else tmp_path / name
    page.screenshot(path=str(target), full_page=True)


def test_the_admin_starts_a_generation_and_the_labeler_gets_its_most_convincing_pick(
    live_server,
    chromium,
    start_worker,  # noqa: F811 (the imported fixture)
    tmp_path,
):
    labels()
    solutions = pool(problems=4, per_problem=7)
    # As in the demo: generation 0 is open, its rest served after any later generation's picks.
    Task.objects.create(generation=make_generation(number=0), solution=solutions[0], priority=-0.5)
    make_staff(name="research")
    labeler = make_labeler(name="ann")
    worker = start_worker()

    admin = chromium.new_context(viewport={"width": 1280, "height": 900}).new_page()
    admin.set_default_timeout(15_000)
    _sign_in(admin, live_server.url, "research")
    admin.goto(live_server.url + "/admin/")
    admin.click("#content-main >> text=Generations")
    admin.click("text=Start a generation")
    # The defaults, with a tiny model so the worker trains in seconds: the common keys in
    # their fields (K comes filled in with its default), the rest as JSON.
    options = config()
    admin.fill("input[name=k]", "6")
    admin.select_option("select[name=per_problem]", "no")
    admin.fill("input[name=base_model]", options.pop("base_model"))
    options.pop("k")
    admin.fill("textarea[name=config]", json.dumps(options))
    admin.click("input[type=submit][value=Start]")
    admin.wait_for_selector("text=requested; its steps run on the workers")

    generation = Generation.objects.get(number=1)
    deadline = time.monotonic() + 120
    while generation.status not in (GenerationStatus.OPEN, GenerationStatus.FAILED):
        assert time.monotonic() < deadline, worker.output()[-4000:]
        time.sleep(0.5)
        generation.refresh_from_db()
    assert generation.status == GenerationStatus.OPEN, generation.error
    picks = list(Task.objects.filter(generation=generation, kind=TaskKind.NORMAL).order_by("-priority", "id"))
    assert len(picks) == 6

    # The generation's page says what each step yielded and when it opened.
    admin.goto(live_server.url + f"/admin/labeling/generation/{generation.pk}/change/")
    body = admin.inner_text("body")
    assert "step open" in body and "selected 6" in body and "opened " in body
    _screenshot(admin, "generation-page.png", tmp_path)

    # The labeler's next task is the most convincing pick of generation 1.
    page = chromium.new_context(viewport={"width": 1100, "height": 900}).new_page()
    page.set_default_timeout(15_000)
    _sign_in(page, live_server.url, "ann")
    page.click("text=Start labeling")
    page.wait_for_selector("#task[data-assignment]")
    assignment = Assignment.objects.select_related("task").get(labeler=labeler)
    assert assignment.task.generation_id == generation.pk
    assert assignment.task.pk == picks[0].pk

    # The dashboard names generation 1 and shows its checkpoint's numbers, within 1,280 px.
    admin.goto(live_server.url + "/dashboard/")
    dashboard = admin.inner_text("body")
    assert "Generation 1" in dashboard
    checkpoint = generation.run.checkpoint
    assert checkpoint is not None
    assert f"#{checkpoint.pk} · generation 1" in dashboard
    assert admin.evaluate("() => document.documentElement.scrollWidth") <= 1280
    smallest = admin.evaluate(
        "() => Math.min(...[...document.querySelectorAll('svg.chart text')]"
        ".map(t => parseFloat(getComputedStyle(t).fontSize) * t.closest('svg').getBoundingClientRect().width"
        " / t.closest('svg').viewBox.baseVal.width))"
    )
    assert smallest >= 10, smallest
    _screenshot(admin, "dashboard.png", tmp_path)
