"""The task screen's rows as labeling/web/panel.py builds them: what a labeler sees and a post sends."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from labeling.web.panel import completion_html, step_row_html
from labeling.work.selectors import CompletionRow, StepRow


def _screen(*, open_: bool = True) -> Any:
    return SimpleNamespace(assignment=SimpleNamespace(pk=17), version=5, is_open=open_)


def test_a_rated_flagged_step_shows_its_state_and_posts_the_next_version() -> None:
    html = completion_html(CompletionRow(3, 0, "x = 1", 1, True, True), screen=_screen(), csrf_token="TOK")
    assert html.startswith('<form class="completion r-good current"')
    assert 'id="c-3-0"' in html and 'action="/assignments/17/steps/3/0/"' in html
    assert 'hx-post="/assignments/17/steps/3/0/"' in html
    assert '<input type="hidden" name="csrfmiddlewaretoken" value="TOK">' in html
    assert '<input type="hidden" name="rating" value="1">' in html
    assert '<input type="hidden" name="flagged" value="1">' in html
    assert '<input type="hidden" name="version" value="6">' in html
    assert 'class="rate good on" aria-pressed="true"' in html
    assert 'class="rate bad" aria-pressed="false"' in html
    assert 'aria-label="Step 4"' in html
    assert 'name="set_flagged" value="0" class="flag on" aria-pressed="true"' in html
    assert "disabled" not in html and "hx-swap-oob" not in html


def test_a_candidate_of_a_closed_task_is_numbered_and_cannot_be_clicked() -> None:
    html = completion_html(CompletionRow(3, 2, "y", None, False, False), screen=_screen(open_=False), csrf_token="")
    assert html.startswith('<form class="completion alt"')
    assert 'aria-label="Candidate 2"' in html and '<span class="alt-n">2.</span>' in html
    assert '<input type="hidden" name="rating" value="">' in html
    assert html.count(" disabled>") == 4  # three ratings and the flag
    assert "csrfmiddlewaretoken" not in html  # no token in the context: none rendered, as {% csrf_token %}


def test_stored_text_is_escaped_and_isolated() -> None:
    text = '<script>alert("x")</script> \u202eevil'
    html = completion_html(CompletionRow(0, 0, text, None, False, False), screen=_screen(), csrf_token="TOK")
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "\u202e" not in html and "U+202E" in html
    assert '<div class="text math"><bdi>' in html


def test_an_error_step_row_carries_its_candidates() -> None:
    row = StepRow(
        own=CompletionRow(2, 0, "wrong", -1, False, False),
        alternatives=[CompletionRow(2, 1, "a", None, False, True), CompletionRow(2, 2, "b", 0, False, False)],
        is_error=True,
    )
    html = step_row_html(row, screen=_screen(), csrf_token="TOK")
    assert html.lstrip().startswith('<li class="step is-error" id="step-2">')
    assert html.count("<form ") == 3
    assert "Other candidates for step 3" in html
    assert html.index('id="c-2-0"') < html.index('id="c-2-1"') < html.index('id="c-2-2"')


def test_the_rating_url_is_what_reverse_answers_under_any_script_prefix() -> None:
    from django.urls import reverse, set_script_prefix

    from annotate.paths import int_path_format
    from labeling.web.panel import step_rows_html

    try:
        for prefix in ("/", "/annotate/", "/a{b}/"):
            set_script_prefix(prefix)
            for args in ((17, 0, 0), (1, 12, 3), (123456789, 99, 10)):
                assert int_path_format("rate", 3).format(*args) == reverse("rate", args=args)
            html = completion_html(CompletionRow(3, 0, "x", None, False, False), screen=_screen(), csrf_token="")
            assert f'action="{reverse("rate", args=(17, 3, 0))}"' in html
            rows = step_rows_html(
                [StepRow(own=CompletionRow(3, 0, "x", None, False, False))], screen=_screen(), csrf_token=""
            )
            assert f'action="{reverse("rate", args=(17, 3, 0))}"' in rows
            assert reverse("rate", args=(17, 3, 0)).startswith(prefix.replace("{", "%7B").replace("}", "%7D"))
    finally:
        set_script_prefix("/")


def test_int_path_answers_as_reverse_for_every_labeler_url_with_integer_arguments() -> None:
    import pytest
    from django.urls import NoReverseMatch, reverse

    from annotate.paths import int_path

    for name, args in (("home", ()), ("guide", ()), ("task", (5,)), ("submit", (12,)), ("give-up", (3,)),
                       ("presses", (77,)), ("phase-one-rate", (4, 2, 1)), ("rate", (9, 0, 3))):  # fmt: skip
        assert int_path(name, *args) == reverse(name, args=args)
    with pytest.raises(NoReverseMatch):
        int_path("task", -1)  # what the int converter cannot take: reverse() says so
    with pytest.raises(NoReverseMatch):
        int_path("no-such-url", 1)
