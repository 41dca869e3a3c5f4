"""A new labeler's first tasks in a real browser: the screening set, how far along it they are, and its result.

Also what the first screening task shows of its expected answer: plain text as
written, LaTeX typeset.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from labeling.models import Labeler, LabelerStatus, Problem
from tests.browser.test_typing import IDLE, _sign_in
from tests.labeling.gold_factories import make_screening_set
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The screening set's gold (tests.labeling.gold_factories): steps 1 and 2 fine, step 3 the first wrong one.
AGREE = ["3", "3", "1"]
DISAGREE = ["3", "3", "3", "3", "3"]


def _answer(page: Any) -> tuple[str, int]:
    """The expected answer as read on screen, and how many typeset formulas it holds."""
    box = page.locator(".problem .answer .answer-box")
    return box.inner_text(), box.locator(".katex").count()


def _label(page: Any, keys: list[str]) -> None:
    for key in keys:
        page.keyboard.press(key)
        time.sleep(0.03)
    page.keyboard.press("Enter")  # straight after the last key, as fast people do


@pytest.fixture
def new_labeler(live_server: Any, page: Any, settings: Any) -> Labeler:
    settings.SCREENING_SET_SIZE = 2
    settings.SCREENING_PASS_THRESHOLD = 0.5
    screening = make_screening_set(size=2)
    # The first item's answer is plain text, the second's LaTeX.
    Problem.objects.filter(solutions__tasks=screening[0]).update(answer="sum_(k=1)^n 1/k")
    Problem.objects.filter(solutions__tasks=screening[1]).update(answer="\\frac{1}{2}")
    make_task(generation=make_generation(number=7), steps=["Alpha.", "Beta."], answer="sqrt(3)")
    labeler = make_labeler(name="newbie", status=LabelerStatus.SCREENING)
    _sign_in(page, live_server.url, "newbie")
    page.click("text=Start labeling")
    page.wait_for_selector("#c-0-0.cursor")
    return labeler


def test_a_passed_screening_is_said_when_it_happens_and_plain_answers_are_not_typeset(
    page: Any, new_labeler: Labeler
) -> None:
    assert "Screening task 1 of 2" in page.inner_text(".set-place")
    text, formulas = _answer(page)
    assert text.strip() == "sum_(k=1)^n 1/k" and formulas == 0

    _label(page, AGREE)
    page.wait_for_selector(".set-place:has-text('Screening task 2 of 2')")
    page.wait_for_selector(".problem .answer .katex")  # \frac{1}{2}, typeset

    _label(page, AGREE)
    page.wait_for_selector(".saved-note.outcome")
    note = page.inner_text(".saved-note.outcome")
    assert "You passed the screening" in note and "2 of 2" in note
    assert "Here is your next task" not in page.inner_text("#task")
    assert page.locator(".set-place").count() == 0  # regular work now
    text, formulas = _answer(page)
    assert text.strip() == "sqrt(3)" and formulas == 0
    page.wait_for_function(IDLE)
    new_labeler.refresh_from_db()
    assert new_labeler.status == LabelerStatus.ACTIVE
    assert page.js_errors == []


def test_a_failed_screening_is_said_when_it_happens(page: Any, new_labeler: Labeler) -> None:
    _label(page, DISAGREE)
    page.wait_for_selector(".set-place:has-text('Screening task 2 of 2')")
    _label(page, DISAGREE)
    page.wait_for_url("**/screening/**")
    message = page.inner_text(".messages")
    assert "That was the last screening task" in message and "did not pass" in message
    assert "0 of 2" in message
    new_labeler.refresh_from_db()
    assert new_labeler.status == LabelerStatus.FAILED_SCREENING


@pytest.mark.parametrize(
    ("answer", "shown", "formulas"),
    [("sum_(k=1)^n 1/k", "sum_(k=1)^n 1/k", 0), ("sqrt(3)", "sqrt(3)", 0), ("\\frac{1}{2}", None, 1)],
)
def test_an_expected_answer_in_plain_text_is_shown_as_written_and_latex_typeset(
    live_server: Any, page: Any, answer: str, shown: str | None, formulas: int
) -> None:
    make_task(generation=make_generation(number=8), steps=["Alpha.", "Beta."], answer=answer)
    make_labeler(name="reader")
    _sign_in(page, live_server.url, "reader")
    page.click("text=Start labeling")
    page.wait_for_selector("#c-0-0.cursor")  # set once the page is typeset (app.js, DOMContentLoaded)
    text, typeset = _answer(page)
    assert typeset == formulas
    if shown is not None:
        assert text.strip() == shown
