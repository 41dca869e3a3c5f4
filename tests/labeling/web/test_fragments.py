"""The task screen's fragments are compiled once per process, not on every rating or hand-out."""

from __future__ import annotations

import re

import pytest
from django.middleware.csrf import _unmask_cipher_token, get_token  # type: ignore[attr-defined]
from django.template import engines
from django.template.loader import get_template, render_to_string
from django.template.loaders.cached import Loader as CachedLoader
from django.test import RequestFactory

from labeling.web.respond import EMPTY_FINISH_BOX, finish_box
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
def test_the_empty_submit_box_is_what_the_template_renders() -> None:
    request = RequestFactory().post("/")
    screen = _screen_with([(0, 0, "Step 0.", 1, None, 1)])
    assert not screen.ready_reason and not screen.progress.stopped_at_error
    rendered = render_to_string("labeling/task.html#finish-box", {"finish": screen.finish}, request=request)
    assert finish_box(request, screen.finish) == EMPTY_FINISH_BOX
    assert " ".join(rendered.split()).replace("> <", "><") == EMPTY_FINISH_BOX


@pytest.mark.django_db
def test_a_fragment_renders_as_with_the_context_processors_and_keeps_its_csrf_token() -> None:
    request = RequestFactory().post("/")
    screen = _screen_with([(0, 0, "Step 0.", 1, None, 1), (1, 0, "Step 1.", 1, None, 2), (2, 0, "Step 2.", 0, None, 3)])
    assert screen.ready_reason == "solution"
    box = finish_box(request, screen.finish)
    assert 'id="finish"' in box and f'name="version" value="{screen.version}"' in box
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', box)
    assert token is not None
    # The same token the request's CSRF cookie will carry (masked differently each time).
    assert _unmask_cipher_token(token.group(1)) == _unmask_cipher_token(get_token(request))
    with_processors = render_to_string("labeling/task.html#finish-box", {"finish": screen.finish}, request=request)
    pattern = r'value="[^"]{64}"'
    assert re.sub(pattern, "", box) == re.sub(pattern, "", with_processors)
