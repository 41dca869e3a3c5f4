"""The phase-2 task panel, built in Python: the task page's body and what submit + next answers with.

Every submit draws the next task's whole panel: its problem and expected
answer, ten or so rateable rows, the submit box and the footer. Through the
template engine the nodes, variable lookups, filters and the footer's include
around the rows cost as much again as the rows themselves, a tenth of a
submit + next. So the panel and its pieces are built
here, in the order they appear on screen, and the templates place them with
one tag each (labeling/templatetags/completion.py: ``{% task_panel %}``,
``{% task_state %}``, ``{% finish_box %}``, ``{% step_rows %}``,
``{% completion %}``, ``{% task_footer %}``). The markup lives here only.

Every value put into the markup is an int, a constant, escaped here, or the
output of isolated() (escaped, in its own ``<bdi>``). Escaped with the
standard library's html.escape, which is what Django's escape() calls, less
its wrapper for lazy strings (none reach here): a panel escapes dozens of
values. Marked safe as SafeString itself, which is what mark_safe() returns
for a str, less the same wrapper.
"""

from __future__ import annotations

from html import escape

from django.forms import Form
from django.utils.safestring import SafeString

from annotate.paths import int_path, int_path_format
from labeling.data.display import isolated
from labeling.quality.control import ScreeningPlace
from labeling.work.answer_display import answer_is_math, answer_segments, answer_tex
from labeling.work.selectors import CompletionRow, FinishBox, StepRow, TaskScreen

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
# Swapped in by htmx: the answer to each form replaces the whole panel.
_HX = 'hx-target="#task" hx-swap="outerHTML"'


def csrf_input(token: str) -> str:
    """The CSRF field of a form, as ``{% csrf_token %}`` renders it (nothing when the context has no token)."""
    if not token or token == "NOTPROVIDED":
        return ""
    return f'<input type="hidden" name="csrfmiddlewaretoken" value="{escape(token)}">'


def completion_html(
    c: CompletionRow, *, screen: TaskScreen, csrf_token: str, oob: bool = False, rate_format: str | None = None
) -> SafeString:
    """The completion's form: its rating and flag buttons, its text, and the hidden state a plain post sends.

    ``rate_format``: the rating URL's pattern (int_path_format), for a caller
    that draws many rows.
    """
    if rate_format is None:
        rate_format = int_path_format("rate", 3)
    url = rate_format.format(screen.assignment.pk, c.step_index, c.completion_index)
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
    token = csrf_input(csrf_token)
    token_line = f"  {token}\n" if token else ""
    rating_class = _RATING_CLASS.get(c.rating, "") if c.rating is not None else ""
    number = f'<span class="alt-n">{c.completion_index}.</span> ' if c.completion_index else ""
    return SafeString(  # see the module's docstring
        f'<form class="completion{" alt" if c.completion_index else ""}{rating_class}'
        f'{" current" if c.is_current else ""}"\n'
        f'      id="c-{c.step_index}-{c.completion_index}" method="post"\n'
        f'      action="{url}"\n'
        f'      hx-post="{url}" {_HX}{_OOB if oob else ""}>\n'
        f"{token_line}"
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


def step_row_html(row: StepRow, *, screen: TaskScreen, csrf_token: str, rate_format: str | None = None) -> SafeString:
    """A step of the screen: its own completion and, at the error step, the candidates offered in its place."""
    if rate_format is None:
        rate_format = int_path_format("rate", 3)
    own = completion_html(row.own, screen=screen, csrf_token=csrf_token, rate_format=rate_format)
    alternatives = ""
    if row.alternatives:
        forms = "".join(
            completion_html(c, screen=screen, csrf_token=csrf_token, rate_format=rate_format) for c in row.alternatives
        )
        alternatives = (
            f'\n  <div class="alternatives">\n    <p class="alt-title">Other candidates for step {row.number}:'
            f" rate each one as if it stood in place of this step.</p>\n    {forms}\n  </div>"
        )
    return SafeString(  # see the module's docstring
        f'\n<li class="step{" is-error" if row.is_error else ""}" id="step-{row.index}">'
        f"\n  {own}{alternatives}\n</li>\n"
    )


def step_rows_html(rows: list[StepRow], *, screen: TaskScreen, csrf_token: str) -> SafeString:
    rate_format = int_path_format("rate", 3)
    return SafeString(  # see the module's docstring
        "".join(step_row_html(row, screen=screen, csrf_token=csrf_token, rate_format=rate_format) for row in rows)
    )


def task_state_html(screen: TaskScreen, *, oob: bool = False) -> SafeString:
    """Where the keyboard starts and the stored state version, which key presses are aimed at.

    static/js/press-queue.js aims presses at the version and app.js reads it
    all after every swap; the counts let it notice a page that missed an
    update (a response dropped as stale) and reload the panel.
    """
    pk = screen.assignment.pk
    return SafeString(  # see the module's docstring
        f'<div id="task-state" hidden data-version="{screen.version}" data-presses="{int_path("presses", pk)}"'
        f' data-open="{"1" if screen.is_open else "0"}" data-current="{screen.current_key if screen.is_open else ""}"'
        f' data-steps="{len(screen.rows)}" data-completions="{screen.completion_count}"{_OOB if oob else ""}></div>'
    )


def finish_box_html(
    finish: FinishBox, *, csrf_token: str, alternatives_pending: bool = False, oob: bool = False
) -> SafeString:
    """The submit box of a state: the submit form once the ratings allow it, else what is still to do."""
    step = finish.progress.stop_index + 1
    if alternatives_pending:
        url = int_path("task", finish.assignment_id)
        inner = (
            f'<p class="hint" hx-get="{url}" hx-trigger="every 2s" {_HX}>\n'
            f"  Other candidates for step {step} are being generated; they appear here in a moment.</p>"
        )
    elif finish.ready_reason:
        url = int_path("submit", finish.assignment_id)
        said = (
            f"You rated step {step} as the first wrong step."
            if finish.ready_reason == "found_error"
            else "Every step is rated and none is wrong."
        )
        inner = (
            f'<form id="finish" class="finish" method="post" action="{url}" hx-post="{url}" {_HX}>\n'
            f"  {csrf_input(csrf_token)}\n"
            f'  <input type="hidden" name="version" value="{finish.version}">\n'
            f"  <p>{said}\n    Check your ratings, then submit.</p>\n"
            f'  <button type="submit" class="primary">Submit and get the next task <kbd>Enter</kbd></button>\n'
            f"</form>"
        )
    elif finish.progress.stopped_at_error:
        inner = f'<p class="hint">Rate each candidate for step {step}, then submit.</p>'
    else:
        return SafeString(f'<div id="finish-box"{_OOB if oob else ""}></div>')  # labeling goes on: nothing to show
    return SafeString(f'<div id="finish-box"{_OOB if oob else ""}>\n{inner}\n</div>')  # see the module's docstring


def _reason_box(
    kind: str, reason: Form | None, *, assignment_id: int, csrf_token: str, summary: str, why: str, button: str
) -> str:
    # ``reason``: the refused reason of this kind (open, with what was typed
    # and why it was refused), or None.
    url = int_path(kind.replace("_", "-"), assignment_id)
    typed = reason["reason"].value() if reason is not None else None
    errors = "".join(f'<p class="error">{escape(str(e))}</p>' for e in reason["reason"].errors) if reason else ""
    return (
        f"  <details{' open' if reason is not None else ''}>\n"
        f"    <summary>{summary}</summary>\n"
        f'    <form method="post" action="{url}" hx-post="{url}" {_HX}>\n'
        f"      {csrf_input(csrf_token)}\n"
        f"      <label>{why}\n"
        f'        <textarea name="reason" rows="2" required maxlength="2000">'
        f"{'' if typed is None else escape(str(typed))}</textarea></label>\n"
        f"      {errors}\n"
        f'      <button type="submit">{button}</button>\n'
        f"    </form>\n"
        f"  </details>\n"
    )


def task_footer_html(
    assignment_id: int,
    *,
    enter_label: str,
    subject: str,
    csrf_token: str,
    reason_kind: str | None = None,
    reason_form: Form | None = None,
) -> SafeString:
    """The keyboard legend and the two ways to leave a task with a reason, on the screens of both phases.

    ``reason_kind`` and ``reason_form``: a reason that was refused (give_up or
    bad_problem), shown open with what was typed and why it was refused.
    """
    give_up = _reason_box(
        "give_up", reason_form if reason_kind == "give_up" else None, assignment_id=assignment_id,
        csrf_token=csrf_token, summary=f"Give up on this {escape(subject)}",
        why='Why? (for example: "needs more than pen-and-paper time", "I do not know this topic")',
        button="Give up and get the next task",
    )  # fmt: skip
    bad_problem = _reason_box(
        "bad_problem", reason_form if reason_kind == "bad_problem" else None, assignment_id=assignment_id,
        csrf_token=csrf_token, summary="Report a bad problem",
        why='What is wrong with the problem? (for example: "the expected answer is wrong", "the problem is ambiguous")',
        button="Report and get the next task",
    )  # fmt: skip
    return SafeString(  # see the module's docstring
        '<div class="keys" aria-label="Keyboard shortcuts">\n'
        "  <span><kbd>1</kbd> bad</span><span><kbd>2</kbd> okay</span><span><kbd>3</kbd> good</span>\n"
        "  <span><kbd>F</kbd> unsure</span><span><kbd>↑</kbd>/<kbd>K</kbd> previous</span>"
        "<span><kbd>↓</kbd>/<kbd>J</kbd> next</span>\n"
        f"  <span><kbd>Enter</kbd> {escape(enter_label)}</span>\n"
        f'  <a href="{int_path("guide")}" target="_blank" rel="noopener">guide</a>\n'
        "</div>\n\n"
        f'<div class="abandon">\n{give_up}{bad_problem}</div>'
    )


def expected_answer_html(answer: str | None) -> SafeString:
    """The expected answer: LaTeX typeset (a whole formula boxed), plain text as written (answer_display)."""
    if not answer:
        return SafeString('<span class="muted">not given</span>')
    if answer_is_math(answer):
        return SafeString(f'<bdi class="math answer-box">\\({escape(answer_tex(answer.strip()))}\\)</bdi>')
    parts = " ".join(
        f'<span class="math">\\({escape(part)}\\)</span>'
        if kind == "math"
        else f'<span class="answer-text">{isolated(part)}</span>'
        for kind, part in answer_segments(answer)
    )
    return SafeString(f'<bdi class="answer-box answer-mixed">{parts}</bdi>')  # see the module's docstring


def task_panel_html(
    screen: TaskScreen | None,
    *,
    csrf_token: str,
    finished: bool = False,
    alternatives_pending: bool = False,
    reason_kind: str | None = None,
    reason_form: Form | None = None,
    note: str | None = None,
    screening: ScreeningPlace | None = None,
) -> SafeString:
    """The panel (``#task``): the problem, the steps shown and kept ahead, the submit box and the footer.

    ``screen`` None: nothing is waiting for the labeler. ``finished``: this
    answers a finish, so it says the last task was saved; ``note``: what the
    finish decided (a screening passed), said instead. ``screening``: the
    screening task's place in the set.
    """
    home = int_path("home")
    outcome = f'<p class="saved-note outcome" role="status">{escape(note)}</p>\n' if note else ""
    if screen is None:
        saved = outcome or ('  <p class="saved-note">Saved.</p>\n' if finished else "")
        return SafeString(  # see the module's docstring
            '<section id="task" class="task empty card">\n'
            f"{saved}"
            "  <p>No more tasks are waiting for you right now. Thank you! Please check back later.</p>\n"
            f'  <p><a href="{home}">Back to the start page</a></p>\n'
            "</section>"
        )
    a = screen.assignment
    # The steps not reached yet, not shown: app.js reveals the next one the
    # moment a key moves labeling past the last one shown.
    ahead = (
        f'<template id="steps-ahead">{step_rows_html(screen.ahead, screen=screen, csrf_token=csrf_token)}</template>\n'
        if screen.ahead
        else ""
    )
    if screen.is_open:
        finish = finish_box_html(screen.finish, csrf_token=csrf_token, alternatives_pending=alternatives_pending)
        footer = task_footer_html(
            a.pk,
            enter_label="submit, only when the submit box is shown",
            subject="solution",
            csrf_token=csrf_token,
            reason_kind=reason_kind,
            reason_form=reason_form,
        )
        end = f"{finish}\n{footer}\n"
    else:
        reason = f" ({escape(a.get_finish_reason_display())})" if a.finish_reason else ""
        end = (
            f'<p class="closed-note">This task is {escape(a.get_status_display())}{reason}'
            f' and can no longer be changed.\n  <a href="{home}">Back to the start page</a></p>\n'
        )
    saved = outcome or ('<p class="saved-note">Saved. Here is your next task.</p>\n' if finished else "")
    if screening is not None:
        saved += (
            f'<p class="set-place">Screening task {screening.number} of {screening.size}'
            ' <span class="muted">· your ratings are compared with reviewers\' before regular work opens</span></p>\n'
        )
    return SafeString(  # see the module's docstring
        f'<section id="task" class="task" data-assignment="{a.pk}">\n'
        f"{task_state_html(screen)}\n"
        f"{saved}"
        '<header class="problem">\n'
        f'  <div class="problem-text math">{isolated(screen.problem.problem)}</div>\n'
        f'  <p class="answer">Expected answer: {expected_answer_html(screen.problem.answer)}</p>\n'
        "</header>\n\n"
        '<ol class="steps" id="steps" aria-label="Steps of the solution">\n'
        f"{step_rows_html(screen.rows, screen=screen, csrf_token=csrf_token)}</ol>\n"
        f"{ahead}\n{end}"
        "</section>"
    )
