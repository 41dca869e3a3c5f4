"""The labeler who never waits: Enter straight after the last key, a reload while presses are being saved.

Chromium's CPU is throttled 6x with 100 ms of network latency (as in
test_typing), and every batch of key presses waits 250-450 ms in the server
before its view runs: the submit box, which the answer to the last press
brings, arrives well after the Enter typed straight after that press, and a
reload's page is rendered before the press sent just before it is stored.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from django.core.handlers.base import BaseHandler

from labeling.models import Assignment, AssignmentStatus, FinishReason
from tests.browser.test_typing import IDLE, _reset, _settle, _shown, _sign_in, _stored, _throttle
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def slow_presses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each batch of key presses waits a random 250-450 ms in the server before its view runs."""
    original = BaseHandler.get_response
    rng = random.Random(40)
    lock = threading.Lock()

    def delayed(self: BaseHandler, request: Any) -> Any:
        if request.method == "POST" and request.path.endswith("/presses/"):
            with lock:
                pause = rng.uniform(0.25, 0.45)
            time.sleep(pause)
        return original(self, request)

    monkeypatch.setattr(BaseHandler, "get_response", delayed)


def _start(live_server: Any, page: Any, steps: list[str], **task: Any) -> Assignment:
    made = make_task(generation=make_generation(number=4), steps=steps, **task)
    make_labeler(name="quick")
    _sign_in(page, live_server.url, "quick")
    page.click("text=Start labeling")
    page.wait_for_selector("#c-0-0.cursor")
    _throttle(page)
    page.set_default_timeout(30000)
    return Assignment.objects.get(task=made)


def _type(page: Any, keys: list[str], interval_ms: int) -> None:
    for key in keys:
        page.keyboard.press(key)
        time.sleep(interval_ms / 1000)


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


@pytest.mark.parametrize("interval_ms", [10, 60])
def test_enter_straight_after_the_last_key_submits_once_the_presses_are_stored(
    live_server: Any, page: Any, slow_presses: None, interval_ms: int
) -> None:
    first = _start(live_server, page, ["One.", "Two.", "Three.", "Four."])
    following = make_task(generation=first.task.generation, steps=["Alpha.", "Beta."])

    _type(page, ["3", "3", "2", "3"], interval_ms)
    page.keyboard.press("Enter")  # the submit box is not shown yet: its press is still being saved

    page.wait_for_selector(f"#task[data-assignment]:not([data-assignment='{first.pk}'])")
    page.wait_for_function(IDLE)
    assert page.get_attribute("#task", "data-assignment") == str(Assignment.objects.get(task=following).pk)
    first.refresh_from_db()
    assert first.status == AssignmentStatus.SUBMITTED
    assert _stored(first) == {0: (1, False), 1: (1, False), 2: (0, False), 3: (1, False)}
    assert page.locator("#flash").is_hidden()
    assert page.js_errors == []


def test_enter_straight_after_a_bad_step_submits_it_as_the_first_wrong_step(
    live_server: Any, page: Any, slow_presses: None
) -> None:
    first = _start(live_server, page, ["One.", "Two.", "Three."])
    make_task(generation=first.task.generation, steps=["Alpha.", "Beta."])

    _type(page, ["3", "1"], 30)
    page.keyboard.press("Enter")

    page.wait_for_selector(f"#task[data-assignment]:not([data-assignment='{first.pk}'])")
    first.refresh_from_db()
    assert first.status == AssignmentStatus.SUBMITTED
    assert first.finish_reason == FinishReason.FOUND_ERROR
    assert _stored(first) == {0: (1, False), 1: (-1, False)}
    assert page.locator("#flash").is_hidden()


def test_enter_before_the_submit_box_is_due_says_so_without_covering_the_row_to_rate(
    live_server: Any, page: Any, slow_presses: None
) -> None:
    page.set_viewport_size({"width": 1100, "height": 520})
    steps = [f"Step {i + 1}: the quantity q{i + 1} equals {i + 2} times q{i}." for i in range(12)]
    first = _start(live_server, page, steps, alternatives={11: ["Another last step.", "A third try."]})

    # Every step rated, the last one -1: its candidates are still to rate, so Enter does not submit.
    _type(page, ["3"] * 11 + ["1"], 30)
    page.keyboard.press("Enter")

    page.wait_for_selector("#c-11-1.cursor")
    page.wait_for_function(IDLE)
    page.wait_for_selector("#flash:not([hidden])")
    assert "Enter submits once the submit box is shown" in page.inner_text("#flash")
    first.refresh_from_db()
    assert first.status == AssignmentStatus.IN_PROGRESS
    # The notice sits below the row to rate, never over it.
    page.wait_for_timeout(300)
    assert not _overlap(page.locator("#flash").bounding_box(), page.locator("#c-11-1").bounding_box())
    assert page.evaluate("() => document.getElementById('c-11-1').getBoundingClientRect().bottom") <= 520

    # Rating the candidates brings the box; Enter straight after the last one submits.
    _type(page, ["2", "1"], 30)
    page.keyboard.press("Enter")
    page.wait_for_selector(".task.empty")
    first.refresh_from_db()
    assert first.status == AssignmentStatus.SUBMITTED
    assert page.js_errors == []


def _wait_ready(page: Any) -> None:
    """The page has loaded what is stored and takes keys (nothing in flight, nothing awaited)."""
    page.wait_for_selector("#task form.completion.cursor")
    page.wait_for_function(IDLE)


def test_a_reload_while_presses_are_being_saved_shows_what_is_stored(
    live_server: Any, page: Any, slow_presses: None
) -> None:
    steps = [f"Step {i + 1}: the quantity q{i + 1} equals {i + 2} times q{i}." for i in range(8)]
    assignment = _start(live_server, page, steps)
    for rep, keys in enumerate([["3"], ["3", "2"], ["2", "3", "3"]]):
        if rep:
            _reset(assignment)
            page.reload()
            _wait_ready(page)
        _type(page, keys, 30)
        page.reload()  # the first batch is on its way; the server stores it after this page is rendered
        _wait_ready(page)
        stored = _settle(page, assignment)
        assert stored, f"rep {rep + 1}: the press sent before the reload was not stored"
        assert _shown(page) == stored, f"rep {rep + 1}: the page shows {_shown(page)}, the server stores {stored}"

        # The next key is applied where the page says, and no other tab is reported.
        page.keyboard.press("3")
        page.wait_for_function(IDLE)
        after = _settle(page, assignment)
        assert page.locator("#flash").is_hidden(), page.inner_text("#flash")
        assert after == {**stored, len(stored): (1, False)}
        assert _shown(page) == after
    assert page.js_errors == []


def test_keys_pressed_as_soon_as_the_next_task_appears_are_used_on_it(live_server: Any, page: Any) -> None:
    # After a submit, htmx swaps the next task in at once and settles it (our cursor, a
    # fresh press queue) a moment later. Keys pressed in between went to the submitted
    # task's queue, held for "Submitting.", and were dropped: Enter then found no submit
    # box. The gap is made long here (1 s instead of 20 ms) so the keys surely fall into it.
    first = _start(live_server, page, ["One.", "Two."])
    following = make_task(generation=first.task.generation, steps=["Alpha.", "Beta."])
    _type(page, ["3", "3"], 30)
    page.wait_for_function(IDLE)
    page.wait_for_selector("#finish")
    page.evaluate("() => { htmx.config.defaultSettleDelay = 1000; }")
    page.keyboard.press("Enter")

    page.wait_for_selector(f"#task[data-assignment]:not([data-assignment='{first.pk}'])")  # swapped in, not settled
    _type(page, ["3", "1"], 30)
    page.keyboard.press("Enter")

    page.wait_for_selector(".task.empty")
    done = Assignment.objects.get(task=following)
    assert done.status == AssignmentStatus.SUBMITTED
    assert done.finish_reason == FinishReason.FOUND_ERROR
    assert _stored(done) == {0: (1, False), 1: (-1, False)}
    assert page.locator("#flash").is_hidden(), page.inner_text("#flash")
    assert page.js_errors == []
