"""Reference answers: prose as text, formulas as math."""

from __future__ import annotations

import pytest

from labeling.work.answer_display import answer_is_math, answer_segments


@pytest.mark.parametrize(
    ("answer", "segments"),
    [
        ("The limit exists and is equal to 3", [("text", "The limit exists and is equal to"), ("math", "3")]),
        ("x=16 and x=81", [("math", "x=16"), ("text", "and"), ("math", "x=81")]),
        (
            "The only possible value for the limit is sqrt(a)",
            [("text", "The only possible value for the limit is"), ("math", "sqrt(a)")],
        ),
        ("0 (i.e., no such values)", [("math", "0"), ("text", "(i.e., no such values)")]),
        ("No", [("text", "No")]),
        ("(x^2+x+1)(x^2-x+1)", [("math", "(x^2+x+1)(x^2-x+1)")]),
        ("all $n \\geq 2$ work", [("text", "all"), ("math", "n \\geq 2"), ("text", "work")]),
        ("\\(\\frac{1}{2}\\) exactly", [("math", "\\frac{1}{2}"), ("text", "exactly")]),
        ("", []),
    ],
)
def test_answers_are_cut_into_text_and_math(answer: str, segments: list[tuple[str, str]]) -> None:
    assert answer_segments(answer) == segments


def test_only_a_whole_formula_is_math() -> None:
    assert answer_is_math("2^n/(n+1)")
    assert answer_is_math("5050")
    assert not answer_is_math("No integer solutions")
