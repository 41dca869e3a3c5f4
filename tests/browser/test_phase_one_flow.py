"""A phase-1 task in a real browser, with candidates from a real OpenAI-compatible HTTP
server (tests/activelearn/stepgen/completions_server.py), and what the export makes of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from annotate.celery import app
from labeling.models import Assignment, AssignmentStatus, FinishReason, LabeledStep
from tests.activelearn.stepgen.completions_server import ServerState, completions_server
from tests.labeling.work.test_phase_one import export_import_export, make_phase_one_task
from tests.labeling.workflow_factories import make_labeler

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PROBLEM = "The denominator of a fraction is 7 less than 3 times the numerator. Find the numerator."
FIRST = "Let $x$ be the numerator, so the denominator is $3x-7$."
OWN = "Cross-multiplying, $5x = 2(3x - 7)$, so $x = 14$."


def documents() -> list[str]:
    # The server continues a prompt with the rest of the documents that start with it,
    # sample i taking the i-th: step 1 gets a, c, d; step 2 gets a, b, g; step 3 e, f.
    p = PROBLEM + "\n\n"
    a = p + FIRST + "\nThen $\\frac{x}{3x-7} = \\frac{2}{5}$.\n"
    b = p + FIRST + "\n# Answer\n\n14"
    c = p + "The answer is obviously $1$.\n"
    d = p + "We set up an equation.\n"
    g = p + FIRST + "\nWe are lost.\n"
    e = p + FIRST + "\n" + OWN + "\n# Answer\n\n14"
    f = p + FIRST + "\n" + OWN + "\nSo the numerator is $14$.\n"
    return [a, c, d, b, g, e, f]


@pytest.fixture
def generator_server(settings) -> Iterator[ServerState]:
    state = ServerState(documents())
    previous = app.conf.task_always_eager
    # No worker in this test: the prefetch task runs inside the request that queues it.
    app.conf.task_always_eager = True
    with completions_server(state) as url:
        settings.STEPGEN_BACKEND = "openai"
        settings.STEPGEN_OPENAI_BASE_URL = url
        settings.STEPGEN_OPENAI_MODEL = "math-gen"
        settings.STEPGEN_K = 3
        settings.STEPGEN_RETRIES = 0
        settings.STEPGEN_CANDIDATE_STORE = "labeling.work.candidates.DatabaseCandidateStore"
        yield state
    app.conf.task_always_eager = previous


def _start_as_ann(live_server, page) -> None:
    """A phase-1 task and its labeler, signed in and started."""
    make_phase_one_task()
    make_labeler(name="ann")
    page.goto(live_server.url + "/")
    page.fill("input[name=username]", "ann")
    page.fill("input[name=password]", "pw-for-tests-1")
    page.click("button[type=submit]")
    page.click("text=Start labeling")


def _wait_saved(page) -> None:
    page.wait_for_function("() => !document.querySelector('.htmx-request')")


def test_it_builds_a_solution_from_candidates_and_its_own_step_and_round_trips_the_export(
    live_server, page, generator_server, tmp_path
):
    _start_as_ann(live_server, page)

    # Step 1: three candidates from the server; rate them by keyboard (good, bad, okay).
    page.wait_for_selector("#c-0-0.cursor")
    assert page.locator("#candidates form.completion").count() == 3
    page.wait_for_selector("#c-0-0 .katex")
    page.keyboard.press("3")
    page.keyboard.press("1")
    page.keyboard.press("2")
    page.wait_for_selector("#c-0-2 .rate.okay.on")
    _wait_saved(page)
    page.wait_for_selector("#finish")
    page.keyboard.press("Enter")  # continue from the only good candidate
    page.wait_for_selector("#decided-0")
    assert "the numerator, so the denominator" in page.inner_text("#decided-0")
    page.wait_for_selector("#decided-0 .katex")  # typeset after the swap settles

    # Step 2: none is good, so the labeler writes their own step (with a live preview).
    page.wait_for_selector("#c-1-2")
    page.keyboard.press("1")
    page.keyboard.press("1")
    page.wait_for_selector("#c-1-2.cursor")
    _wait_saved(page)

    # A reload resumes with the ratings given so far.
    page.reload()
    page.wait_for_selector("#c-1-2.cursor")
    assert page.locator("#c-1-0 .rate.bad.on").count() == 1
    assert page.locator("#c-1-1 .rate.bad.on").count() == 1
    page.keyboard.press("2")
    page.wait_for_selector("#own-step[required]")
    page.fill("#own-step", OWN)
    page.wait_for_selector("#own-preview .katex")
    page.click("#finish button.primary")

    # Step 3: the final answer is good; continuing with it ends the task.
    page.wait_for_selector("#decided-1")
    page.wait_for_selector("#c-2-0.cursor")
    answer = 0 if "final answer" in page.inner_text("#c-2-0") else 1
    assert "final answer" in page.inner_text(f"#c-2-{answer}")
    keys = ["3", "2"] if answer == 0 else ["2", "3"]
    page.keyboard.press(keys[0])
    page.keyboard.press(keys[1])
    page.wait_for_selector("#c-2-1 .rate.on")
    _wait_saved(page)
    page.keyboard.press("Enter")
    page.wait_for_selector("text=No more tasks are waiting for you")
    assert page.js_errors == []

    assignment = Assignment.objects.get()
    assert (assignment.status, assignment.finish_reason) == (AssignmentStatus.SUBMITTED, FinishReason.SOLUTION)
    steps = list(LabeledStep.objects.filter(assignment=assignment).order_by("index"))
    assert [(s.chosen_completion, s.human_completion) for s in steps] == [(0, None), (None, OWN), (answer, None)]
    assert [[r.rating for r in s.ratings.order_by("completion_index")] for s in steps] == [
        [1, -1, 0],
        [-1, -1, 0],
        [1, 0] if answer == 0 else [0, 1],
    ]
    assert len(generator_server.requests) >= 3

    assert export_import_export(tmp_path)


def test_a_key_pressed_while_a_skipped_older_response_is_in_flight_still_lands(live_server, page, generator_server):
    # Mouse and keyboard at once on a slow server: the first click's response comes back
    # after the second's and is not swapped in (it is older), so no panel settles after
    # it. A key pressed while it was in flight waited for that panel; it must still land,
    # on the step the labeler saw selected.
    _start_as_ann(live_server, page)
    page.wait_for_selector("#c-0-0.cursor")
    page.wait_for_selector("#c-0-0 .katex")

    held: list[Any] = []
    seen: list[Any] = []

    def hold_the_first(route):  # later ratings of c-0-0 go straight through
        seen.append(route)
        held.append(route) if len(seen) == 1 else route.continue_()

    page.route("**/phase-one/0/0/", hold_the_first)
    page.click("#c-0-0 .rate.good")
    while not held:
        page.wait_for_timeout(20)
    page.click("#c-0-1 .rate.bad")  # answered at once, and swapped in
    page.wait_for_selector("#c-0-1 .rate.bad.on")
    page.wait_for_function("() => document.querySelectorAll('.htmx-request').length <= 1")
    cursor = page.evaluate("() => document.querySelector('#task form.completion.cursor').id")
    page.keyboard.press("2")  # waits: a request is still in flight
    held.pop().continue_()

    page.wait_for_selector(f"#{cursor} .rate.okay.on")
    _wait_saved(page)
    step = LabeledStep.objects.get(assignment=Assignment.objects.get(), index=0)
    ratings = {r.completion_index: r.rating for r in step.ratings.all()}
    pressed = int(cursor.rsplit("-", 1)[1])
    assert ratings[pressed] == 0  # the key press, on the step that was selected
    assert ratings[0] == (0 if pressed == 0 else 1) and ratings[1] == (0 if pressed == 1 else -1)
    assert page.js_errors == []


def test_a_key_pressed_after_a_panel_is_swapped_in_but_before_it_settles_lands_on_its_cursor(
    live_server, page, generator_server
):
    # htmx swaps a response in at once and settles it (sets classes, our cursor) a moment
    # later. A key pressed in between used the old panel's cursor: a second quick key
    # rated the step the first had just rated. The gap is made long here (1 s instead of
    # 20 ms) so the key surely falls into it.
    _start_as_ann(live_server, page)
    page.wait_for_selector("#c-0-0.cursor")
    page.wait_for_selector("#c-0-0 .katex")
    page.evaluate("() => { htmx.config.defaultSettleDelay = 1000; document.getElementById('task').oldPanel = true; }")

    page.keyboard.press("3")
    page.wait_for_function("() => !document.getElementById('task').oldPanel")  # swapped in, not settled
    page.keyboard.press("1")  # meant for the step the first key moves the cursor to

    page.wait_for_selector("#c-0-1 .rate.bad.on")
    _wait_saved(page)
    page.wait_for_function("() => !window.htmx || !document.querySelector('.htmx-settling')")
    step = LabeledStep.objects.get(assignment=Assignment.objects.get(), index=0)
    ratings = {r.completion_index: r.rating for r in step.ratings.all()}
    assert (ratings[0], ratings[1], ratings.get(2)) == (1, -1, None)  # the third candidate: not rated yet
    assert page.locator("#c-0-0 .rate.good.on").count() == 1
    assert page.js_errors == []
