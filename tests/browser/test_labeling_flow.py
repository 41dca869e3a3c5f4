"""A labeler's session in a real browser, end to end, and what the export makes of it."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from labeling.models import Assignment, AssignmentStatus
from tests.labeling.workflow_factories import (
    make_generation,
    make_labeler,
    make_task,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


STEPS_A = [
    "Let the numerator be $x$, so the denominator is $3x-7$.",
    "The fraction is equivalent to $2/5$, so \\(\\frac{x}{3x-7} = \\frac{2}{5}\\).",
    "Cross-multiplying gives $$5x = 2(3x-7) = 6x - 14.$$",
    "So $x = 7$, and the numerator is \\[\\boxed{7}\\]",
    "Check: a pencil costs $5 and a pen costs $7, which is unrelated.",
]
STEPS_B = ["Write $200,\\!000 = 2^6 \\cdot 5^5$.", "Then the answer is $\\boxed{40}$."]
ALTERNATIVES = ["Subtracting $5x$ from both sides gives $x = 14$.", "So $x - 14 = 0$, hence $x = 14$."]


def _wait_saved(page) -> None:
    # Nothing in flight: no htmx request, and no key press waiting in the press queue.
    page.wait_for_function("() => !document.querySelector('.htmx-request') && !window.pressQueue.busy()")


def test_it_labels_by_keyboard_resumes_after_reload_and_exports_what_was_clicked(live_server, page, tmp_path):
    generation = make_generation(number=3)
    task_a = make_task(generation=generation, steps=STEPS_A, priority=2, alternatives={3: ALTERNATIVES})
    task_b = make_task(generation=generation, steps=STEPS_B, priority=1, answer="40")
    labeler = make_labeler(name="ann")

    # Sign in and start.
    page.goto(live_server.url + "/")
    page.fill("input[name=username]", "ann")
    page.fill("input[name=password]", "pw-for-tests-1")
    page.click("button[type=submit]")
    page.click("text=Start labeling")
    page.wait_for_selector("#c-0-0.cursor")
    assert page.locator(".problem .katex").count() >= 1  # the boxed expected answer

    # Rate by keyboard: 3 = good, 2 = okay. Each key reveals the next step,
    # swapped in beside the rated row (the panel itself stays), and typeset.
    page.evaluate("() => { window.__panel = document.getElementById('task'); }")
    page.keyboard.press("3")
    page.wait_for_selector("#c-1-0.cursor")
    page.wait_for_selector("#c-1-0 .katex")
    assert page.evaluate("() => document.getElementById('task') === window.__panel") is True
    page.wait_for_selector("#c-0-0 .katex")  # the re-rendered row is typeset again
    page.keyboard.press("2")
    page.wait_for_selector("#c-2-0.cursor")
    _wait_saved(page)

    # A reload (or crash) resumes at the same step with the same ratings.
    page.reload()
    page.wait_for_selector("#c-2-0.cursor")
    assert page.locator("#c-0-0 .rate.good.on").count() == 1
    assert page.locator("#c-1-0 .rate.okay.on").count() == 1
    page.keyboard.press("3")
    page.wait_for_selector("#c-3-0.cursor")

    # Change an earlier rating in place: back up with the arrow key, press 2.
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    assert "cursor" in (page.get_attribute("#c-0-0", "class") or "")
    page.keyboard.press("2")
    page.wait_for_selector("#c-0-0 .rate.okay.on")
    page.wait_for_selector("#c-3-0.cursor")  # back to where labeling stands

    # Step 4 is wrong: rate it bad, then the two candidates offered for it.
    page.keyboard.press("1")
    page.wait_for_selector("#c-3-1.cursor")
    page.keyboard.press("3")
    page.wait_for_selector("#c-3-2.cursor")
    page.keyboard.press("1")
    page.wait_for_selector("#finish")
    page.keyboard.press("f")  # unsure about the last candidate
    page.wait_for_selector("#c-3-2 .flag.on")
    _wait_saved(page)
    assert page.locator("#c-4-0").count() == 0  # labeling stopped at the error
    assert page.locator(".katex").count() >= 8
    assert page.locator(".katex-error").count() == 0
    # The documentation's screenshot is the demo's (scripts/docs_screenshots.py), not this fixture's.
    page.screenshot(path=str(tmp_path / "task-screen.png"), full_page=True)

    # Submit with Enter: the next task arrives without a page load.
    page.evaluate("() => { window.__samePage = true; }")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"#task[data-assignment]:not([data-assignment='{_assignment_id(task_a)}'])")
    assert page.evaluate("() => window.__samePage") is True
    assert f"/assignments/{_assignment_id(task_b)}/" in page.url
    page.wait_for_selector("#c-0-0 .katex")  # typeset after the swap
    assert "$200" not in page.inner_text("#c-0-0")

    # Give up on the second one, with a reason.
    page.keyboard.press("3")
    page.wait_for_selector("#c-1-0.cursor")
    page.click("text=Give up on this solution")
    page.fill("textarea[name=reason]", "I cannot check the factorisation quickly")
    page.click("text=Give up and get the next task")
    page.wait_for_selector("text=No more tasks are waiting for you")
    assert page.js_errors == []

    # What the export makes of it.
    assert set(Assignment.objects.values_list("status", flat=True)) == {AssignmentStatus.SUBMITTED}
    out = tmp_path / "labels.jsonl"
    call_command("export_prm800k", "--output", str(out), "--no-progress")
    records = {r["question"]["pre_generated_steps"][0]: r for r in map(json.loads, out.read_text().splitlines())}
    a, b = records[STEPS_A[0]], records[STEPS_B[0]]

    assert a["labeler"] == str(labeler.uuid)
    assert a["generation"] == 3
    assert a["question"]["ground_truth_answer"] == "14"
    assert a["label"]["finish_reason"] == "found_error"
    assert isinstance(a["label"]["total_time"], int) and a["label"]["total_time"] >= 0
    steps = a["label"]["steps"]
    assert [s["chosen_completion"] for s in steps] == [0, 0, 0, None]
    assert [s["completions"][0]["rating"] for s in steps] == [0, 0, 1, -1]
    assert [c["text"] for c in steps[3]["completions"]] == [STEPS_A[3], *ALTERNATIVES]
    assert [(c["rating"], c["flagged"]) for c in steps[3]["completions"]] == [(-1, None), (1, False), (-1, True)]
    trajectory = [s["completions"][s["chosen_completion"]]["text"] for s in steps[:-1]]
    assert trajectory == STEPS_A[:3]
    for i, step in enumerate(steps):
        assert step["completions"][0]["text"] == a["question"]["pre_generated_steps"][i]
        assert step["human_completion"] is None

    assert b["label"]["finish_reason"] == "give_up"
    assert [s["completions"][0]["rating"] for s in b["label"]["steps"]] == [1]
    assert [s["chosen_completion"] for s in b["label"]["steps"]] == [None]


def _assignment_id(task) -> int:
    return Assignment.objects.get(task=task).pk
