"""The task panel as labeling/web/panel.py builds it: well formed in every state, the same on the page and in htmx."""

from __future__ import annotations

import itertools
import re
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.urls import reverse

from labeling.models import Assignment, AssignmentStatus, FinishReason, Problem, Solution, Task
from labeling.web.forms import ReasonForm
from labeling.web.panel import finish_box_html, task_footer_html, task_panel_html, task_state_html
from labeling.work.selectors import Ratings, TaskScreen, task_screen_from
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

_VOID = {"input", "br", "img", "meta", "link", "hr", "circle", "path"}


class _Nesting(HTMLParser):
    """Every element closed, in order: what a typo in a hand-built tag breaks first."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        pass  # <circle ... />

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1:] or 'nothing'} at {self.getpos()}")
        else:
            self.open.pop()


def _well_formed(html: str) -> None:
    parser = _Nesting()
    parser.feed(html)
    parser.close()
    assert parser.errors == [] and parser.open == [], (parser.errors, parser.open)


_STEPS = ["Let <x> & \u202ey", "x = $1$", "y = 2", "So 3"]
_RATINGS: dict[str, Ratings] = {
    "fresh": [],
    "partly rated, one flagged": [(0, 0, _STEPS[0], 1, False, 1), (1, 0, _STEPS[1], 0, True, 2)],
    "error, a candidate to rate": [
        (0, 0, _STEPS[0], 1, False, 1),
        (1, 0, _STEPS[1], -1, None, 2),
        (1, 1, "candidate <1>", None, None, 3),
        (1, 2, "candidate 2", 1, True, 4),
    ],
    "error, ready": [(0, 0, _STEPS[0], 1, False, 1), (1, 0, _STEPS[1], -1, None, 2)],
    "all rated": [(i, 0, s, 1, i == 2, i + 1) for i, s in enumerate(_STEPS)],
}


def _screen(ratings: Ratings, *, answer: str = "3", status: str = AssignmentStatus.IN_PROGRESS) -> TaskScreen:
    # Unsaved rows: the panel reads only what a loaded assignment carries.
    problem = Problem(pk=5, problem="Find <x> & y\u202e?", answer=answer)
    task = Task(pk=7, solution=Solution(pk=6, problem=problem, steps=list(_STEPS)))
    reason = FinishReason.SOLUTION if status == AssignmentStatus.SUBMITTED else ""
    a = Assignment(pk=41, task=task, status=status, finish_reason=reason, version=len(ratings) + 3)
    return task_screen_from(assignment=a, ratings=ratings)


@pytest.mark.parametrize(
    ("ratings", "answer", "status"),
    list(
        itertools.product(
            _RATINGS.values(),
            ["", "\\frac{1}{2}", "The limit exists and is 3 <b>&"],
            [AssignmentStatus.IN_PROGRESS, AssignmentStatus.SUBMITTED, AssignmentStatus.EXPIRED],
        )
    ),
)
def test_every_state_of_the_panel_is_well_formed(ratings: Ratings, answer: str, status: str) -> None:
    screen = _screen(ratings, answer=answer, status=status)
    for finished, pending in itertools.product((False, True), (False, True)):
        html = task_panel_html(screen, csrf_token="T0K", finished=finished, alternatives_pending=pending)
        _well_formed(html)
        assert html.count('id="task-state"') == 1 and html.count("<section") == 1
        assert ("Saved. Here is your next task." in html) == finished
        assert "<script" not in html and "<x>" not in html and "\u202e" not in html
        if screen.is_open:
            assert html.count('name="csrfmiddlewaretoken" value="T0K"') == html.count("<form")
            assert "closed-note" not in html and 'id="finish-box"' in html
        else:
            assert html.count(" disabled>") == 4 * screen.completion_count  # three ratings and the flag each
            assert "Give up" not in html and 'id="finish-box"' not in html
            assert "can no longer be changed" in html
    _well_formed(task_state_html(screen, oob=True))
    _well_formed(finish_box_html(screen.finish, csrf_token="T0K", alternatives_pending=True, oob=True))


def test_the_empty_panel_says_nothing_is_waiting() -> None:
    for finished in (False, True):
        html = task_panel_html(None, csrf_token="T0K", finished=finished)
        _well_formed(html)
        assert "No more tasks are waiting" in html and ('class="saved-note"' in html) == finished


def test_the_submit_box_says_what_the_ratings_allow() -> None:
    box = finish_box_html(_screen(_RATINGS["error, ready"]).finish, csrf_token="T0K")
    assert "You rated step 2 as the first wrong step." in box
    assert 'action="/assignments/41/submit/"' in box and 'name="version" value="5"' in box
    box = finish_box_html(_screen(_RATINGS["all rated"]).finish, csrf_token="T0K")
    assert "Every step is rated and none is wrong." in box
    box = finish_box_html(_screen(_RATINGS["error, a candidate to rate"]).finish, csrf_token="T0K")
    assert box == '<div id="finish-box">\n<p class="hint">Rate each candidate for step 2, then submit.</p>\n</div>'
    box = finish_box_html(_screen(_RATINGS["fresh"]).finish, csrf_token="T0K", alternatives_pending=True)
    assert 'hx-get="/assignments/41/" hx-trigger="every 2s"' in box and "step 1 are being generated" in box
    assert finish_box_html(_screen(_RATINGS["fresh"]).finish, csrf_token="T0K") == '<div id="finish-box"></div>'


def test_the_cursor_and_the_counts_app_js_reads() -> None:
    state = task_state_html(_screen(_RATINGS["error, a candidate to rate"]))
    assert 'data-version="7"' in state and 'data-presses="/assignments/41/presses/"' in state
    assert 'data-open="1" data-current="c-1-1" data-steps="2" data-completions="4"' in state
    state = task_state_html(_screen(_RATINGS["all rated"], status=AssignmentStatus.SUBMITTED))
    assert 'data-open="0" data-current=""' in state


def test_a_refused_reason_comes_back_open_with_what_was_typed_and_why() -> None:
    form = ReasonForm({"reason": '<b>"x"</b>' + "y" * 2000})
    assert not form.is_valid()
    footer = task_footer_html(41, enter_label="continue", subject="problem", csrf_token="T0K",
                              reason_kind="bad_problem", reason_form=form)  # fmt: skip
    _well_formed(footer)
    give_up, bad = footer.split("<details")[1:]
    assert not give_up.startswith(" open") and 'maxlength="2000"></textarea>' in give_up
    assert bad.startswith(" open") and "&lt;b&gt;&quot;x&quot;&lt;/b&gt;yyy" in bad
    assert '<p class="error">Ensure this value has at most 2000 characters (it has 2010).</p>' in bad
    assert 'action="/assignments/41/give-up/"' in give_up and 'action="/assignments/41/bad-problem/"' in bad
    assert "Give up on this problem" in give_up and "<kbd>Enter</kbd> continue" in footer


def _section(html: str) -> str:
    found = re.search(r'<section id="task".*?</section>', html, re.S)
    assert found is not None
    return " ".join(
        re.sub(r'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]+">', "", found.group(0)).split()
    )


@pytest.mark.django_db
def test_the_page_and_its_htmx_fragment_show_the_same_panel() -> None:
    make_task(generation=make_generation())
    labeler = make_labeler()
    client = Client()
    client.force_login(labeler.user)
    client.post(reverse("next-task"))
    a = Assignment.objects.get(labeler=labeler)
    client.post(reverse("rate", args=[a.pk, 0, 0]), {"set_rating": "1", "flagged": "0", "version": 1})
    page = client.get(reverse("task", args=[a.pk])).content.decode()
    fragment = client.get(reverse("task", args=[a.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert "<html" in page and "<html" not in fragment
    assert _section(page) == _section(fragment)
    # Whole pages carry the token in every form (posts without JavaScript);
    # htmx sends the page's in its header (base.html), so the fragment has none.
    assert page.count('name="csrfmiddlewaretoken"') == _section(page).count("<form") + 1  # and sign out's
    assert "csrfmiddlewaretoken" not in fragment and '"X-CSRFToken": "' in page
    _well_formed(fragment)
    assert 'id="c-0-0"' in fragment and 'class="completion current"' in fragment


@pytest.mark.django_db
def test_htmx_posts_from_a_panel_without_token_fields_pass_the_csrf_check_with_the_pages_header() -> None:
    for _ in range(2):
        make_task(generation=make_generation(), steps=["Only step."])
    labeler = make_labeler()
    client = Client(enforce_csrf_checks=True)
    client.force_login(labeler.user)
    home = client.get(reverse("home")).content.decode()
    token = re.search(r'"X-CSRFToken": "([^"]+)"', home)
    assert token is not None
    headers = {"HX-Request": "true", "X-CSRFToken": token.group(1)}
    assert client.post(reverse("next-task")).status_code == 403  # no token at all: refused
    client.post(reverse("next-task"), headers={"X-CSRFToken": token.group(1)})
    first = Assignment.objects.get(labeler=labeler)
    panel = client.get(reverse("task", args=[first.pk]), headers=headers).content.decode()
    assert "csrfmiddlewaretoken" not in panel
    rated = client.post(reverse("rate", args=[first.pk, 0, 0]), {"set_rating": "1", "version": 1}, headers=headers)
    assert rated.status_code == 200
    answer = client.post(reverse("submit", args=[first.pk]), {"version": 1}, headers=headers)
    assert answer.status_code == 200 and "Saved. Here is your next task." in answer.content.decode()
    assert "csrfmiddlewaretoken" not in answer.content.decode()
    first.refresh_from_db()
    assert first.status == AssignmentStatus.SUBMITTED
