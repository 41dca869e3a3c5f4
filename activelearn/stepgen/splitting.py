"""What counts as one step in generated text.

A step is one line, as in PRM800K, with one exception: the final-answer trailer. In
the release a solution ends with ``...\\n\\n# Answer\\n\\n320,000``; a line-by-line
generator (stop at ``\\n``) would cut that into a blank line, a bare ``# Answer`` and
the answer, none of which is a step a labeler can rate. So:

* leading blank lines are skipped (a model may put a blank line before ``# Answer``);
* a line that starts with ``# Answer`` is a step of its own that runs through the next
  non-blank line (the answer), written canonically as ``# Answer\\n\\n<answer>``; an
  answer on the marker's own line (``# Answer: 7``) is accepted too;
* any other line is the step, stripped.

The answer step is therefore its own step rather than glued onto the last reasoning
line as in phase-2 ``pre_generated_steps``; ``activelearn.grading.extract_final_answer``
reads either form, and the trajectory text (steps joined by newlines) still ends in a
``# Answer`` trailer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ANSWER_MARKER = "# Answer"


@dataclass(frozen=True)
class FirstStep:
    """The first step found in generated text.

    ``text`` is None while the text holds no step yet (only blank lines, or a bare
    ``# Answer`` without its answer). ``complete`` is True once a newline follows the
    step, i.e. more generation could not change it.
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


def first_step(generated: str) -> FirstStep:
    """Split off the first step of text generated after a prompt that ends in a newline."""
    lines = _normalise_newlines(generated).split("\n")
    last = len(lines) - 1  # lines[last] has no newline after it (yet)
    index = 0
    while index <= last and not lines[index].strip():
        index += 1
    if index > last:
        return FirstStep(None, False)
    line = lines[index].strip()
    inline = _answer_inline(line)
    if inline is None:
        return FirstStep(line, index < last)
    if inline:
        return FirstStep(f"{ANSWER_MARKER}\n\n{inline}", index < last)
    answer_index = index + 1
    while answer_index <= last and not lines[answer_index].strip():
        answer_index += 1
    if answer_index > last:
        return FirstStep(None, False)
    return FirstStep(f"{ANSWER_MARKER}\n\n{lines[answer_index].strip()}", answer_index < last)


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
