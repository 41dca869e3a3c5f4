"""The staff dashboard fits the window, on a laptop and on a phone: nothing runs past the page's edge
and no chart cuts a label, legend or mark at its own edge."""

from __future__ import annotations

from typing import Any

import pytest

from activelearn.models import CheckpointStatus, PRMCheckpoint
from labeling.models import Task, TaskKind
from labeling.quality.gold import GoldStepSpec, gold_set
from tests.labeling.admin_factories import make_labeled_generation, make_staff, make_submitted
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every element drawn in a chart whose box reaches past the chart's own box, by more than a pixel.
CLIPPED = """() => {
    const cut = [];
    for (const svg of document.querySelectorAll('svg.chart')) {
        const frame = svg.getBoundingClientRect();
        for (const mark of svg.querySelectorAll('text, rect, circle')) {
            const box = mark.getBoundingClientRect();
            if (box.width === 0 && box.height === 0) continue;
            if (box.left < frame.left - 1 || box.right > frame.right + 1
                || box.top < frame.top - 1 || box.bottom > frame.bottom + 1) {
                cut.push(svg.getAttribute('aria-label') + ': ' + (mark.textContent || mark.tagName));
            }
        }
    }
    return cut;
}"""

# Every box of the page that reaches past the window's right edge (a scrolling table's
# cells are inside their scroller, which must itself fit).
PAST_THE_EDGE = """() => {
    const width = document.documentElement.clientWidth;
    const boxes = '.topbar, .topbar nav a, .topbar form, main, .panel, .table-scroll, .export-card, .export-form, h2';
    const out = [];
    for (const el of document.querySelectorAll(boxes)) {
        const box = el.getBoundingClientRect();
        if (box.right > width + 1 || box.left < -1) {
            out.push((el.id || el.className || el.tagName) + ' ' + Math.round(box.left) + '..' + Math.round(box.right));
        }
    }
    return out;
}"""


@pytest.fixture
def campaign(db: None) -> None:
    """A campaign with something in every chart: labels, open work, gold agreement, checkpoints."""
    make_labeled_generation(solutions=3)
    open_generation = make_generation(number=1)
    for _ in range(4):
        make_task(generation=open_generation)
    carol = make_labeler(name="carol")
    # Agreement over two generations: the last x label sits at the chart's right edge.
    for number in (2, 13):
        task = make_task(generation=make_generation(number=number), steps=["a", "b"])
        gold_set(
            solution=task.solution,
            steps=[GoldStepSpec(step_index=1, negative_ok=True, neutral_ok=False, positive_ok=False)],
        )
        Task.objects.filter(pk=task.pk).update(kind=TaskKind.QUALITY_CONTROL, is_quality_control=True)
        make_submitted(task=task, labeler=carol, ratings=[1, -1], finish_reason="found_error")
    for auroc in (0.61, 0.72):
        PRMCheckpoint.objects.create(
            base_model="tiny-backbone-with-a-long-name",
            status=CheckpointStatus.TRAINING,
            metrics={"val_loss": 0.5, "val_auroc": auroc, "train_loss_first": 0.9, "train_loss_last": 0.4},
            calibration={"first_error": {"f1": 0.4}},
        )
    make_staff(name="research")


@pytest.mark.parametrize("width", [1280, 390])
def test_the_dashboard_fits_the_window_and_its_charts_cut_nothing(
    live_server: Any, chromium: Any, campaign: None, width: int
) -> None:
    context = chromium.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.goto(live_server.url + "/login/")
    page.fill("input[name=username]", "research")
    page.fill("input[name=password]", "pw-for-tests-1")
    page.click("button[type=submit]")
    page.goto(live_server.url + "/dashboard/")
    page.wait_for_selector("#prm-checkpoints svg.chart")

    scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
    assert scroll_width <= width, f"the page is {scroll_width} px wide in a {width} px window"
    assert page.evaluate(PAST_THE_EDGE) == []
    assert page.evaluate(CLIPPED) == []
    # The checkpoint table is whole: it fits, or it scrolls inside its own box.
    table = page.evaluate(
        """() => { const s = document.querySelector('#prm-checkpoints .table-scroll');
                   return [s.scrollWidth, s.clientWidth, getComputedStyle(s).overflowX]; }"""
    )
    assert table[0] <= table[1] or table[2] == "auto"
    # The legend names every series of the evaluation chart, best-of-N's included.
    legend = page.locator("#prm-checkpoints svg.chart").first.text_content() or ""
    assert "best-of-N, majority" in legend
    context.close()
