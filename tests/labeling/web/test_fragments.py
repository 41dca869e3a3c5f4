"""The task screen's fragments are compiled once per process, not on every rating or hand-out."""

from __future__ import annotations

import re

import pytest
from django.middleware.csrf import _unmask_cipher_token, get_token  # type: ignore[attr-defined]
from django.template import engines
from django.template.loader import get_template, render_to_string
from django.template.loaders.cached import Loader as CachedLoader
from django.test import RequestFactory

from labeling.web.respond import finish_box
from labeling.work.queue import assignment_next
from labeling.work.selectors import TaskScreen, task_screen_from
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task


def test_templates_are_loaded_through_the_cached_loader() -> None:
    # DEBUG off (and on, since Django 4.1): no "loaders" option, so Django
    # wraps the file loaders in the cached one; template_partials wraps that.
    outer = engines["django"].engine.template_loaders  # type: ignore[attr-defined]
    inner = [loader for wrapper in outer for loader in getattr(wrapper, "loaders", [wrapper])]
    assert any(isinstance(loader, CachedLoader) for loader in inner)


def test_the_rating_and_panel_fragments_are_compiled_once() -> None:
    for name in ("labeling/task.html#rated", "labeling/task.html#task-panel"):
        assert get_template(name).template is get_template(name).template  # type: ignore[attr-defined]


def _screen_with(ratings: list[tuple[int, int, str, int | None, bool | None, int]], steps: int = 3) -> TaskScreen:
    task = make_task(generation=make_generation(), steps=[f"Step {i}." for i in range(steps)])
    assignment = assignment_next(labeler=make_labeler())
    assert assignment is not None and assignment.task_id == task.pk
    return task_screen_from(assignment=assignment, ratings=ratings)


@pytest.mark.django_db
def test_while_labeling_goes_on_the_submit_box_is_empty_and_masks_no_csrf_token() -> None:
    request = RequestFactory().post("/")
    screen = _screen_with([(0, 0, "Step 0.", 1, None, 1)])
    assert not screen.ready_reason and not screen.progress.stopped_at_error
    assert finish_box(request, screen.finish) == '<div id="finish-box"></div>'
    assert "CSRF_COOKIE" not in request.META  # get_token() was not asked: nothing to post yet


@pytest.mark.django_db
def test_the_key_press_answers_the_submit_box_the_page_shows_with_the_requests_csrf_token() -> None:
    request = RequestFactory().post("/")
    screen = _screen_with([(0, 0, "Step 0.", 1, None, 1), (1, 0, "Step 1.", 1, None, 2), (2, 0, "Step 2.", 0, None, 3)])
    assert screen.ready_reason == "solution"
    box = finish_box(request, screen.finish)
    assert 'id="finish"' in box and f'name="version" value="{screen.version}"' in box
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', box)
    assert token is not None
    # The same token the request's CSRF cookie will carry (masked differently each time).
    assert _unmask_cipher_token(token.group(1)) == _unmask_cipher_token(get_token(request))
    # The whole page, rendered with the context processors, shows that very box.
    page = render_to_string("labeling/task.html#task-panel", {"screen": screen}, request=request)
    pattern = r'value="[^"]{64}"'
    assert re.sub(pattern, "", box) in re.sub(pattern, "", page)
