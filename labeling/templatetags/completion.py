"""``{% completion c %}`` and ``{% step_rows rows %}``: the rateable rows of the task screen, built in Python.

The task panel draws one of these per step shown and per step kept ahead
(static/js/app.js reveals them), so a fresh 10-step task draws ten. As a
template partial it was most of the CPU of a submit that hands out the next
task: the attribute lookups and ``{% if %}`` nodes of ten forms, two URL
reversals each (docs/benchmarks.md). The markup is the same; it lives here
only, used by the whole page and by every fragment (task.html).
"""

from __future__ import annotations

from django import template
from django.template.context import Context
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from annotate.paths import int_path
from labeling.data.display import isolated
from labeling.work.selectors import CompletionRow, StepRow, TaskScreen

register = template.Library()

_RATING_CLASS = {-1: " r-bad", 0: " r-okay", 1: " r-good"}
_FACES = {
    -1: '<path d="M7.5 17 q4.5 -4.5 9 0"/>',
    0: '<path d="M8 15.5 h8"/>',
    1: '<path d="M7.5 14 q4.5 4.5 9 0"/>',
}
_BUTTONS = (
    (-1, "bad", "Bad: wrong, unverifiable or a dead end (key 1)"),
    (0, "okay", "Okay: correct but adds nothing (key 2)"),
    (1, "good", "Good: correct and makes progress (key 3)"),
)
_OOB = ' hx-swap-oob="true"'
_EYES = '<circle cx="8.5" cy="9.5" r="1.2" class="eye"/><circle cx="15.5" cy="9.5" r="1.2" class="eye"/>'


def rate_url(assignment_id: int, step_index: int, completion_index: int) -> str:
    return int_path("rate", assignment_id, step_index, completion_index)


def completion_html(c: CompletionRow, *, screen: TaskScreen, csrf_token: str, oob: bool = False) -> SafeString:
    """The completion's form: its rating and flag buttons, its text, and the hidden state a plain post sends."""
    url = rate_url(screen.assignment.pk, c.step_index, c.completion_index)
    disabled = "" if screen.is_open else " disabled"
    label = f"Candidate {c.completion_index}" if c.completion_index else f"Step {c.step_index + 1}"
    buttons = "".join(
        f'\n    <button type="submit" name="set_rating" value="{value}"'
        f' class="rate {name}{" on" if c.rating == value else ""}"'
        f' aria-pressed="{"true" if c.rating == value else "false"}" title="{title}"{disabled}>\n'
        f'      <svg viewBox="0 0 24 24" aria-hidden="true"><circle cx="12" cy="12" r="10"/>{_EYES}{_FACES[value]}'
        f'</svg><span class="sr">{name}</span></button>'
        for value, name, title in _BUTTONS
    )
    # As {% csrf_token %} renders it (nothing when the context has no token).
    token = (
        f'  <input type="hidden" name="csrfmiddlewaretoken" value="{escape(csrf_token)}">\n'
        if csrf_token and csrf_token != "NOTPROVIDED"
        else ""
    )
    rating_class = _RATING_CLASS.get(c.rating, "") if c.rating is not None else ""
    number = f'<span class="alt-n">{c.completion_index}.</span> ' if c.completion_index else ""
    return mark_safe(  # every value in it is an int, a constant, escaped, or isolated() (escaped)
        f'<form class="completion{" alt" if c.completion_index else ""}{rating_class}'
        f'{" current" if c.is_current else ""}"\n'
        f'      id="c-{c.step_index}-{c.completion_index}" method="post"\n'
        f'      action="{url}"\n'
        f'      hx-post="{url}" hx-target="#task" hx-swap="outerHTML"{_OOB if oob else ""}>\n'
        f"{token}"
        f'  <input type="hidden" name="rating" value="{"" if c.rating is None else c.rating}">\n'
        f'  <input type="hidden" name="flagged" value="{"1" if c.flagged else "0"}">\n'
        f'  <input type="hidden" name="version" value="{screen.version + 1}">\n'
        f'  <div class="rate-buttons" role="group" aria-label="{label}">{buttons}\n  </div>\n'
        f'  <div class="text math">{number}{isolated(c.text)}</div>\n'
        f'  <button type="submit" name="set_flagged" value="{"0" if c.flagged else "1"}"'
        f' class="flag{" on" if c.flagged else ""}" aria-pressed="{"true" if c.flagged else "false"}"'
        f' title="Unsure about this rating (key F)"{disabled}>&#9873;<span class="sr">unsure</span></button>\n'
        f"</form>"
    )


def step_row_html(row: StepRow, *, screen: TaskScreen, csrf_token: str) -> SafeString:
    """A step of the screen: its own completion and, at the error step, the candidates offered in its place."""
    own = completion_html(row.own, screen=screen, csrf_token=csrf_token)
    alternatives = ""
    if row.alternatives:
        forms = "".join(completion_html(c, screen=screen, csrf_token=csrf_token) for c in row.alternatives)
        alternatives = (
            f'\n  <div class="alternatives">\n    <p class="alt-title">Other candidates for step {row.number}:'
            f" rate each one as if it stood in place of this step.</p>\n    {forms}\n  </div>"
        )
    return mark_safe(  # built from completion_html's safe output, ints and constants
        f'\n<li class="step{" is-error" if row.is_error else ""}" id="step-{row.index}">'
        f"\n  {own}{alternatives}\n</li>\n"
    )


def _token(context: Context) -> str:
    return str(context.get("csrf_token") or "")


@register.simple_tag
def int_url(name: str, *args: int) -> str:
    """``{% int_url 'submit' a.pk %}``: ``{% url %}`` for integer arguments, formatted (annotate.paths)."""
    return int_path(name, *args)


@register.simple_tag(takes_context=True)
def completion(context: Context, c: CompletionRow) -> SafeString:
    return completion_html(c, screen=context["screen"], csrf_token=_token(context), oob=bool(context.get("oob")))


@register.simple_tag(takes_context=True)
def step_rows(context: Context, rows: list[StepRow]) -> SafeString:
    """The rows, in order, from one tag: a loop turn and a tag per row cost the template engine about what the
    row itself costs to build."""
    screen, token = context["screen"], _token(context)
    return mark_safe("".join(step_row_html(row, screen=screen, csrf_token=token) for row in rows))  # built safe
