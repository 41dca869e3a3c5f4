"""The labeler screens' tags: each places a piece of the task screen that labeling.web.panel builds in Python.

``{% task_panel %}`` (the whole phase-2 panel), ``{% task_state %}`` and
``{% finish_box %}`` (as the rating click's answer swaps them in),
``{% completion c %}`` and ``{% step_rows rows %}`` (rateable rows),
``{% task_footer %}`` (both phases' footer), ``{% expected_answer %}`` (both
phases' expected answer) and ``{% int_url %}``. They read
what the panel needs from the template's context: ``screen``, ``oob``,
``finished``, ``alternatives_pending``, a refused ``reason_form`` with its
``reason_kind``, a ``note`` and the ``screening`` place, and the ``csrf_token``.
"""

from __future__ import annotations

from django import template
from django.template.context import Context
from django.utils.safestring import SafeString

from annotate.paths import int_path
from labeling.web.panel import (
    completion_html,
    expected_answer_html,
    finish_box_html,
    step_rows_html,
    task_footer_html,
    task_panel_html,
    task_state_html,
)
from labeling.work.selectors import CompletionRow, StepRow

register = template.Library()


def _token(context: Context) -> str:
    return str(context.get("csrf_token") or "")


@register.simple_tag
def int_url(name: str, *args: int) -> str:
    """``{% int_url 'submit' a.pk %}``: ``{% url %}`` for integer arguments, formatted (annotate.paths)."""
    return int_path(name, *args)


@register.simple_tag
def expected_answer(answer: str | None) -> SafeString:
    """``{% expected_answer problem.answer %}``: LaTeX typeset, plain text as written."""
    return expected_answer_html(answer)


@register.simple_tag(takes_context=True)
def completion(context: Context, c: CompletionRow) -> SafeString:
    return completion_html(c, screen=context["screen"], csrf_token=_token(context), oob=bool(context.get("oob")))


@register.simple_tag(takes_context=True)
def step_rows(context: Context, rows: list[StepRow]) -> SafeString:
    return step_rows_html(rows, screen=context["screen"], csrf_token=_token(context))


@register.simple_tag(takes_context=True)
def task_state(context: Context) -> SafeString:
    return task_state_html(context["screen"], oob=bool(context.get("oob")))


@register.simple_tag(takes_context=True)
def finish_box(context: Context) -> SafeString:
    return finish_box_html(
        context["screen"].finish,
        csrf_token=_token(context),
        alternatives_pending=bool(context.get("alternatives_pending")),
        oob=bool(context.get("oob")),
    )


@register.simple_tag(takes_context=True)
def task_footer(context: Context, *, enter_label: str, subject: str) -> SafeString:
    """``{% task_footer enter_label="continue" subject="problem" %}``, below the assignment ``screen`` shows."""
    return task_footer_html(
        context["screen"].assignment.pk,
        enter_label=enter_label,
        subject=subject,
        csrf_token=_token(context),
        reason_kind=context.get("reason_kind"),
        reason_form=context.get("reason_form"),
    )


@register.simple_tag(takes_context=True)
def task_panel(context: Context) -> SafeString:
    return task_panel_html(
        context.get("screen"),
        csrf_token=_token(context),
        finished=bool(context.get("finished")),
        alternatives_pending=bool(context.get("alternatives_pending")),
        reason_kind=context.get("reason_kind"),
        reason_form=context.get("reason_form"),
        note=context.get("note"),
        screening=context.get("screening"),
    )
