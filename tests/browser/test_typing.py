"""Fast typing on a slow machine and a slow network: every key press lands on the step the labeler saw.

Chromium's CPU is throttled 6x (CDP Emulation.setCPUThrottlingRate) and every
request is delayed: 100 ms by CDP network emulation, plus a random 0-200 ms
inside the server before the view runs, so requests also overtake each other
as they do between several web workers. Sequences of at least 50 rating keys,
mixed with flag and previous/next keys, are typed at 10, 30 and 60 ms
intervals; after each, what is stored (and shown) must be what a small pure
model of the keys says the labeler meant.

Repetitions reuse one browser page: the assignment is reset through the ORM
and the page reloaded. ``TYPING_REPS`` sets how many per interval (default 2,
what the suite affords; the full matrix is ``TYPING_REPS=20``).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.handlers.base import BaseHandler
from django.db.models import F

from labeling.models import Assignment, AssignmentStatus, FinishReason, LabeledStep, StepRating
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPS = int(os.environ.get("TYPING_REPS", "2"))
STEP_COUNT = 60
STEPS = [f"Step {i + 1}: the quantity q{i + 1} equals {i + 2} times q{i}." for i in range(STEP_COUNT)]
RATING_KEYS = 50


# --- The pure model of the keys (what docs/labeling-guide.md says they do) ---------


@dataclass
class Intent:
    """The own ratings and flags a labeler means to store, and where the cursor is, after each key."""

    steps: int
    ratings: dict[int, int] = field(default_factory=dict)
    flags: set[int] = field(default_factory=set)
    cursor: int = 0

    @property
    def frontier(self) -> int:
        """The first unrated step: labeling stands there; the steps after it are not shown yet."""
        return next((i for i in range(self.steps) if i not in self.ratings), self.steps)

    @property
    def last_shown(self) -> int:
        return min(self.frontier, self.steps - 1)

    def press(self, key: str) -> None:
        if key in ("2", "3"):
            # A rating (never -1 here: that ends the trajectory) moves the cursor
            # to where labeling stands: the first unrated step, or the last one.
            self.ratings[self.cursor] = {"2": 0, "3": 1}[key]
            self.cursor = self.last_shown
        elif key == "f":
            self.flags ^= {self.cursor}
        elif key in ("ArrowUp", "k"):
            self.cursor = max(0, self.cursor - 1)
        elif key in ("ArrowDown", "j"):
            self.cursor = min(self.last_shown, self.cursor + 1)

    def stored_form(self) -> dict[int, tuple[int | None, bool]]:
        return {i: (self.ratings.get(i), i in self.flags) for i in sorted(set(self.ratings) | self.flags)}


def key_sequence(rng: random.Random) -> list[str]:
    keys: list[str] = []
    ratings = 0
    while ratings < RATING_KEYS:
        roll = rng.random()
        if roll < 0.68:
            keys.append(rng.choice("23"))
            ratings += 1
        elif roll < 0.78:
            keys.append("f")
        elif roll < 0.89:
            keys.append(rng.choice(["ArrowUp", "k"]))
        else:
            keys.append(rng.choice(["ArrowDown", "j"]))
    return keys


def intent_of(keys: list[str]) -> Intent:
    intent = Intent(steps=STEP_COUNT)
    for key in keys:
        intent.press(key)
    return intent


def test_the_model_of_the_keys() -> None:
    intent = intent_of(["3", "2", "ArrowUp", "ArrowUp", "f", "2", "j", "j", "j", "f", "3"])
    # Up twice from step 3 to step 1, flag it, re-rate it 0 (the cursor returns
    # to step 3, where labeling stands), down stays there (step 4 is not shown
    # yet), flag step 3 and rate it: the cursor moves on to step 4.
    assert intent.ratings == {0: 0, 1: 0, 2: 1}
    assert intent.flags == {0, 2}
    assert intent.cursor == 3
    assert intent.stored_form() == {0: (0, True), 1: (0, False), 2: (1, True)}


# --- The browser under load ------------------------------------------------------------


@pytest.fixture
def slow_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each POST to an assignment waits a random 0-200 ms in the server before its view runs."""
    original = BaseHandler.get_response
    rng = random.Random(15)
    lock = threading.Lock()

    def delayed(self: BaseHandler, request: Any) -> Any:
        if request.method == "POST" and request.path.startswith("/assignments/"):
            with lock:
                pause = rng.uniform(0, 0.2)
            time.sleep(pause)
        return original(self, request)

    monkeypatch.setattr(BaseHandler, "get_response", delayed)


def _sign_in(page: Any, url: str, name: str) -> None:
    page.goto(url + "/login/")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", "pw-for-tests-1")
    page.click("button[type=submit]")
    page.wait_for_url(url + "/")


def _throttle(page: Any) -> None:
    cdp = page.context.new_cdp_session(page)
    cdp.send("Emulation.setCPUThrottlingRate", {"rate": 6})
    cdp.send("Network.enable")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 100, "downloadThroughput": -1, "uploadThroughput": -1},
    )


IDLE = """() => !document.querySelector('.htmx-request')
    && !(window.pressQueue && window.pressQueue.busy())"""


def _stored(assignment: Assignment) -> dict[int, tuple[int | None, bool]]:
    rows = StepRating.objects.filter(step__assignment=assignment, completion_index=0).values_list(
        "step__index", "rating", "flagged"
    )
    return {i: (r, bool(f)) for i, r, f in sorted(rows)}


def _settle(page: Any, assignment: Assignment) -> dict[int, tuple[int | None, bool]]:
    """Wait until the page has nothing in flight and the stored state stopped changing."""
    deadline = time.monotonic() + 30
    last = None
    while time.monotonic() < deadline:
        page.wait_for_function(IDLE, timeout=30000)
        now = _stored(assignment)
        if now == last:
            return now
        last = now
        time.sleep(0.4)
    return _stored(assignment)


def _shown(page: Any) -> dict[int, tuple[int | None, bool]]:
    """The own rating and flag of each step as the page shows them (pending ones included)."""
    values = page.evaluate(
        """() => Array.from(document.querySelectorAll('#steps form.completion:not(.alt)')).map(f => {
            const on = f.querySelector('.rate.on');
            return [f.id, on ? on.value : null, !!f.querySelector('.flag.on')];
        })"""
    )
    shown = {}
    for form_id, rating, flagged in values:
        index = int(form_id.split("-")[1])
        if rating is not None or flagged:
            shown[index] = (None if rating is None else int(rating), bool(flagged))
    return shown


def _first_mismatch(expected: dict[int, tuple[int | None, bool]], got: dict[int, tuple[int | None, bool]]) -> str:
    for i in sorted(set(expected) | set(got)):
        if expected.get(i) != got.get(i):
            return f"step {i + 1} expected {_fmt(expected.get(i))} stored {_fmt(got.get(i))}"
    return ""


def _fmt(value: tuple[int | None, bool] | None) -> str:
    if value is None:
        return "nothing"
    rating, flagged = value
    text = {None: "unrated", -1: "-1", 0: "0", 1: "+1"}[rating]
    return text + (" flagged" if flagged else "")


def _reset(assignment: Assignment) -> None:
    """Back to an unrated task, as a state change (the page's next load starts from it)."""
    LabeledStep.objects.filter(assignment=assignment).delete()
    if any(f.name == "version" for f in Assignment._meta.concrete_fields):
        Assignment.objects.filter(pk=assignment.pk).update(version=F("version") + 1)


@pytest.fixture
def typing_task(live_server: Any, page: Any, slow_server: None) -> Iterator[tuple[Any, Assignment]]:
    task = make_task(generation=make_generation(number=1), steps=STEPS)
    make_labeler(name="fast")
    _sign_in(page, live_server.url, "fast")
    page.click("text=Start labeling")
    page.wait_for_selector("#c-0-0.cursor")
    assignment = Assignment.objects.get(task=task)
    _throttle(page)
    # A throttled page on a busy machine loads slowly: a timeout here would say nothing about the keys.
    page.set_default_timeout(60000)
    yield page, assignment


@pytest.mark.parametrize("interval_ms", [10, 30, 60])
def test_fast_typing_stores_exactly_the_typed_intent(typing_task: tuple[Any, Assignment], interval_ms: int) -> None:
    page, assignment = typing_task
    rng = random.Random(1000 + interval_ms)
    wrong: list[str] = []
    for rep in range(REPS):
        if rep:
            _reset(assignment)
            page.reload()
        page.wait_for_selector("#c-0-0.cursor")
        keys = key_sequence(rng)
        for key in keys:
            page.keyboard.press(key)
            time.sleep(interval_ms / 1000)
        expected = intent_of(keys).stored_form()
        stored = _settle(page, assignment)
        shown = _shown(page)
        if stored != expected:
            wrong.append(f"rep {rep + 1}: first mismatch {_first_mismatch(expected, stored)}")
        elif shown != stored:
            wrong.append(f"rep {rep + 1}: shown differs from stored: {_first_mismatch(stored, shown)} (shown)")
        elif page.locator("form.completion.pending").count():
            wrong.append(f"rep {rep + 1}: stored presses still marked as pending")
    summary = f"{interval_ms} ms: {len(wrong)}/{REPS} reps wrong" + (f", {wrong[0]}" if wrong else "")
    print(summary)
    assert not wrong, summary + "\n" + "\n".join(wrong)
    assert page.js_errors == []


# --- Two tabs, Enter, Back -----------------------------------------------------------


def _open_task(live_server: Any, page: Any, steps: list[str], name: str = "ann") -> Assignment:
    task = make_task(generation=make_generation(number=2), steps=steps)
    make_labeler(name=name)
    _sign_in(page, live_server.url, name)
    page.click("text=Start labeling")
    page.wait_for_selector("#c-0-0.cursor")
    return Assignment.objects.get(task=task)


def _wait_idle(page: Any) -> None:
    page.wait_for_function(IDLE)


def test_a_stale_tab_is_told_and_shown_what_is_stored(live_server: Any, page: Any) -> None:
    assignment = _open_task(live_server, page, ["One.", "Two.", "Three."])
    tab_b = page.context.new_page()
    tab_b.set_default_timeout(8000)
    tab_b.goto(page.url)
    tab_b.wait_for_selector("#c-0-0.cursor")

    # Tab A rates step 1 +1 and moves on; tab B still shows step 1 unrated.
    page.keyboard.press("3")
    page.wait_for_selector("#c-1-0.cursor")
    _wait_idle(page)
    assert _stored(assignment) == {0: (1, False)}

    # B's key on step 1 is not applied to anything, and B says so and shows what is stored.
    tab_b.keyboard.press("2")
    tab_b.wait_for_selector("#flash:not([hidden])")
    assert "changed in another tab" in tab_b.inner_text("#flash")
    tab_b.wait_for_selector("#c-0-0 .rate.good.on")
    tab_b.wait_for_selector("#c-1-0.cursor")
    _wait_idle(tab_b)
    assert _stored(assignment) == {0: (1, False)}
    assert tab_b.locator("#c-0-0 .rate.okay.on").count() == 0

    # After that, B's keys mean what B shows.
    tab_b.keyboard.press("2")
    tab_b.wait_for_selector("#c-2-0.cursor")
    _wait_idle(tab_b)
    assert _stored(assignment) == {0: (1, False), 1: (0, False)}


def test_enter_never_rates(live_server: Any, page: Any) -> None:
    assignment = _open_task(live_server, page, ["One.", "Two."])

    # "Report a bad problem" with the mouse, then Tab and Enter, twice.
    page.click("text=Report a bad problem")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")
    # Focus on a rating button, as Tab and Shift+Tab put it there: Enter is not a rating.
    page.focus("#c-0-0 button.rate.bad")
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")
    page.focus("#c-0-0 button.flag")
    page.keyboard.press("Enter")
    time.sleep(0.5)
    _wait_idle(page)
    assignment.refresh_from_db()
    assert assignment.status == AssignmentStatus.IN_PROGRESS
    assert _stored(assignment) == {}
    assert page.locator("#c-0-0 .rate.on").count() == 0

    # The legend says what Enter does; it submits once the submit panel is shown.
    legend = page.inner_text(".keys")
    assert "Enter" in legend and "submit" in legend and "when" in legend
    page.keyboard.press("3")
    page.wait_for_selector("#c-1-0.cursor")
    page.keyboard.press("3")
    page.wait_for_selector("#finish")
    _wait_idle(page)
    page.keyboard.press("Enter")
    page.wait_for_selector("text=No more tasks are waiting for you")
    assignment.refresh_from_db()
    assert assignment.status == AssignmentStatus.SUBMITTED
    assert _stored(assignment) == {0: (1, False), 1: (1, False)}


def test_back_to_a_submitted_task_shows_it_read_only(live_server: Any, page: Any) -> None:
    first = _open_task(live_server, page, ["One.", "Two."])
    second_task = make_task(generation=first.task.generation, steps=["Alpha.", "Beta."])
    page.keyboard.press("3")
    page.wait_for_selector("#c-1-0.cursor")
    page.keyboard.press("2")
    page.wait_for_selector("#finish")
    _wait_idle(page)
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#task[data-assignment]:not([data-assignment='{first.pk}'])")
    page.wait_for_url(f"**/assignments/{Assignment.objects.get(task=second_task).pk}/")
    page.wait_for_selector("#c-0-0.cursor")

    page.go_back()
    page.wait_for_url(f"**/assignments/{first.pk}/")
    page.wait_for_selector(".closed-note")
    assert page.locator("#finish").count() == 0
    assert page.locator("#c-0-0 button.rate:not([disabled])").count() == 0
    page.keyboard.press("1")
    time.sleep(0.5)
    _wait_idle(page)
    assert _stored(first) == {0: (1, False), 1: (0, False)}
    assert page.locator("#c-0-0 .rate.good.on").count() == 1

    # The response itself says it must not be kept for Back.
    response = page.request.get(page.url)
    assert "no-store" in (response.headers.get("cache-control") or "")


def test_a_press_is_pending_until_stored_and_taken_back_when_it_is_not(live_server: Any, page: Any) -> None:
    assignment = _open_task(live_server, page, ["One.", "Two.", "Three."])
    held: list[Any] = []
    page.route("**/presses/", lambda route: held.append(route))

    # Shown at once, marked pending, and the next step is there to rate.
    page.keyboard.press("3")
    page.wait_for_selector("#c-0-0.pending .rate.good.on")
    page.wait_for_selector("#c-1-0.cursor")
    page.wait_for_function("() => window.pressQueue.busy()")
    assert _stored(assignment) == {}
    held.pop().continue_()
    page.wait_for_selector("#c-0-0:not(.pending) .rate.good.on")
    _wait_idle(page)
    assert _stored(assignment) == {0: (1, False)}

    # A press the server does not store is taken back, and the page says so.
    page.keyboard.press("2")
    page.wait_for_selector("#c-1-0.pending .rate.okay.on")
    page.wait_for_function("() => window.pressQueue.busy()")
    while not held:
        page.wait_for_timeout(50)
    held.pop().fulfill(status=500, body="boom")
    page.wait_for_selector("#flash:not([hidden])")
    assert "1 key press was not saved" in page.inner_text("#flash")
    page.wait_for_selector("#c-1-0.cursor:not(.pending)")
    _wait_idle(page)
    assert page.locator("#c-1-0 .rate.on").count() == 0
    assert page.locator("#c-0-0 .rate.good.on").count() == 1
    assert _stored(assignment) == {0: (1, False)}


def _next_held(page: Any, held: list[Any]) -> Any:
    """The next key-press batch the page sent, held by the test's route until it is let through (or answered)."""
    while not held:
        page.wait_for_timeout(20)
    return held.pop()


def _press_then_give_up(page: Any, key: str) -> None:
    page.wait_for_selector("#c-0-0.cursor")
    page.keyboard.press(key)
    page.click("text=Give up on this solution")
    page.fill("textarea[name=reason]", "Too long for me")
    page.click("text=Give up and get the next task")


def test_submit_and_give_up_asked_for_while_presses_are_unsaved_wait_for_them(live_server: Any, page: Any) -> None:
    first = _open_task(live_server, page, ["One.", "Two."])
    second_task = make_task(generation=first.task.generation, steps=["Alpha.", "Beta."])
    third_task = make_task(generation=first.task.generation, steps=["Gamma.", "Delta."])
    held: list[Any] = []
    page.route("**/presses/", lambda route: held.append(route))

    # Enter right after the last key: the submit waits for the press, then goes.
    for key in ("3", "3"):
        page.keyboard.press(key)
        _next_held(page, held).continue_()
        _wait_idle(page)
    page.wait_for_selector("#finish")
    page.keyboard.press("f")  # unsaved: held below
    page.keyboard.press("Enter")
    page.wait_for_selector("#flash:not([hidden])")
    assert "Saving your last ratings first" in page.inner_text("#flash")
    first.refresh_from_db()
    assert first.status == AssignmentStatus.IN_PROGRESS
    _next_held(page, held).continue_()
    page.wait_for_selector(f"#task[data-assignment]:not([data-assignment='{first.pk}'])")
    first.refresh_from_db()
    assert first.status == AssignmentStatus.SUBMITTED
    assert _stored(first) == {0: (1, False), 1: (1, True)}

    # Give up with the mouse while a key is unsaved: the press is stored, then the give-up is made.
    second = Assignment.objects.get(task=second_task)
    _press_then_give_up(page, "2")
    page.wait_for_selector("#flash:not([hidden])")
    second.refresh_from_db()
    assert second.status == AssignmentStatus.IN_PROGRESS
    _next_held(page, held).continue_()
    page.wait_for_selector(f"#task[data-assignment]:not([data-assignment='{second.pk}'])")
    second.refresh_from_db()
    assert second.status == AssignmentStatus.SUBMITTED
    assert second.finish_reason == FinishReason.GIVE_UP
    assert _stored(second) == {0: (0, False)}

    # A press the server refuses: the give-up waiting for it is not made, and the page says so.
    third = Assignment.objects.get(task=third_task)
    _press_then_give_up(page, "3")
    _next_held(page, held).fulfill(status=500, body="boom")
    page.wait_for_selector("text=was not sent")
    _wait_idle(page)
    third.refresh_from_db()
    assert third.status == AssignmentStatus.IN_PROGRESS
    assert _stored(third) == {}
    assert page.js_errors == []
