"""What counts as one step in model-written text: the one splitter for the demo data,
``import_solutions`` and step generation.

A step is one line, as in PRM800K, with these exceptions:

* blank lines are skipped;
* a display block stays in one step: ``\\[ ... \\]``, ``$$ ... $$``, ``\\begin{..} ...
  \\end{..}`` and fenced code, however many lines it spans (a step holding half a formula
  cannot be rendered or rated). A block still open at the end of a whole solution (a
  cut-off reply) is not merged, so a stray ``\\[`` cannot swallow the rest;
* the final-answer trailer: in PRM800K a solution ends ``...\\n\\n# Answer\\n\\n320,000``.
  A line that starts with ``# Answer`` is a step of its own that runs through the next
  non-blank line (the answer), written canonically ``# Answer\\n\\n<answer>``; an answer on
  the marker's own line (``# Answer: 7``) is accepted too;
* a whole solution's leading header line that only labels it ("Step-wise solution:",
  as few-shot prompts teach models to write) is not a step.

``split_steps`` splits a whole solution; ``first_step`` splits off the first step of text
still being generated, and says whether more generation could change it. Both go
through the same grouping of lines, so a generated step is exactly what splitting the
finished text would give.

The answer step is therefore its own step rather than glued onto the last reasoning
line as in phase-2 ``pre_generated_steps``; ``activelearn.grading.extract_final_answer``
reads either form, and the trajectory text (steps joined by newlines) still ends in a
``# Answer`` trailer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

ANSWER_MARKER = "# Answer"

_HEADER_LINE = re.compile(r"^\s*step-wise solution:\s*$", re.IGNORECASE)
_BEGIN_ENV = re.compile(r"\\begin\{[^}]*\}")
_END_ENV = re.compile(r"\\end\{[^}]*\}")


@dataclass(frozen=True)
class FirstStep:
    """The first step found in generated text.

    ``text`` is None while the text holds no step yet (only blank lines, a bare
    ``# Answer`` without its answer, or a display block not yet closed). ``complete`` is
    True once a newline follows the step, i.e. more generation could not change it.
    """

    text: str | None
    complete: bool


def _normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _answer_inline(line: str) -> str | None:
    """The answer written on the marker line itself, '' if none, None if not a marker line."""
    if not line.startswith(ANSWER_MARKER):
        return None
    rest = line[len(ANSWER_MARKER) :]
    # "# Answers are ..." is prose, not the marker.
    if rest and not (rest[0].isspace() or rest[0] == ":"):
        return None
    return rest.lstrip(":").strip()


def _block_is_open(lines: list[str]) -> bool:
    """Whether the lines so far leave a display-math, environment or code block open."""
    text = "\n".join(lines)
    if text.count("```") % 2:
        return True
    if text.count("$$") % 2:
        return True
    if text.count("\\[") > text.count("\\]"):
        return True
    return len(_BEGIN_ENV.findall(text)) > len(_END_ENV.findall(text))


@dataclass(frozen=True)
class _Group:
    text: str | None  # None: no step (yet)
    next_line: int  # index of the first line after the group
    complete: bool  # a newline follows the group's last line


def _group(lines: list[str], start: int, *, whole: bool) -> _Group | None:
    """The step starting at ``lines[start]``; None when only blank lines are left.

    ``lines[-1]`` has no newline after it. ``whole``: the text is a finished solution, so a
    block still open at its end is a cut-off reply (its first line stands alone) rather
    than a step still being written.
    """
    last = len(lines) - 1
    index = start
    while index <= last and not lines[index].strip():
        index += 1
    if index > last:
        return None
    line = lines[index].strip()
    inline = _answer_inline(line)
    if inline:
        return _Group(f"{ANSWER_MARKER}\n\n{inline}", index + 1, index < last)
    if inline == "":
        answer_index = index + 1
        while answer_index <= last and not lines[answer_index].strip():
            answer_index += 1
        if answer_index > last:
            return _Group(None, answer_index, False)
        answer = lines[answer_index].strip()
        return _Group(f"{ANSWER_MARKER}\n\n{answer}", answer_index + 1, answer_index < last)
    block = [line]
    end = index
    while _block_is_open(block) and end < last:
        end += 1
        if lines[end].strip():
            block.append(lines[end].rstrip())
    if _block_is_open(block):
        if whole:
            return _Group(line, index + 1, True)
        return _Group(None, end + 1, False)
    return _Group("\n".join(block).strip(), end + 1, end < last)


def first_step(generated: str) -> FirstStep:
    """Split off the first step of text generated after a prompt that ends in a newline."""
    group = _group(_normalise_newlines(generated).split("\n"), 0, whole=False)
    if group is None:
        return FirstStep(None, False)
    return FirstStep(group.text, group.complete and group.text is not None)


def split_steps(text: str) -> list[str]:
    """Every step of a whole solution, in order."""
    lines = _normalise_newlines(text).split("\n")
    index = 0
    while index < len(lines) and not lines[index].strip():
        index += 1
    if index < len(lines) and _HEADER_LINE.match(lines[index]):
        index += 1
    steps: list[str] = []
    while (group := _group(lines, index, whole=True)) is not None:
        if group.text:
            steps.append(group.text)
        index = group.next_line
    return steps


def is_answer_step(step: str) -> bool:
    return _answer_inline(step.split("\n", 1)[0].strip()) is not None


def dedupe(steps: Iterable[str]) -> list[str]:
    """Distinct steps in first-seen order (exact match after stripping)."""
    seen: dict[str, None] = {}
    for step in steps:
        stripped = step.strip()
        if stripped:
            seen.setdefault(stripped, None)
    return list(seen)
