"""Reference answers: LaTeX typeset as math, plain text shown as written."""

from __future__ import annotations

import pytest

from labeling.work.answer_display import answer_is_math, answer_segments, answer_tex


@pytest.mark.parametrize(
    ("answer", "segments"),
    [
        # Plain text, however mathematical: typeset, its words would turn into italic letters
        # and its brackets and long scripts into wrong sub- and superscripts.
        ("sum_(k=1)^n 1/k", [("text", "sum_(k=1)^n 1/k")]),
        ("sqrt(3)", [("text", "sqrt(3)")]),
        ("x^10", [("text", "x^10")]),
        ("The limit exists and is equal to 3", [("text", "The limit exists and is equal to 3")]),
        ("x=16 and x=81", [("text", "x=16 and x=81")]),
        ("No", [("text", "No")]),
        # A plain formula that TeX reads as written is typeset.
        ("(x^2+x+1)(x^2-x+1)", [("math", "(x^2+x+1)(x^2-x+1)")]),
        ("4^n", [("math", "4^n")]),
        ("5050", [("math", "5050")]),
        # Delimited math, with the text around it.
        ("all $n \\geq 2$ work", [("text", "all"), ("math", "n \\geq 2"), ("text", "work")]),
        ("\\(\\frac{1}{2}\\) exactly", [("math", "\\frac{1}{2}"), ("text", "exactly")]),
        ("$x$ or sqrt(3)", [("math", "x"), ("text", "or sqrt(3)")]),
        # Undelimited LaTeX: commands and braced scripts; its words stay text.
        ("\\frac{1}{2}", [("math", "\\frac{1}{2}")]),
        ("2^{10}", [("math", "2^{10}")]),
        ("\\{1, 2\\}", [("math", "\\{1, 2\\}")]),
        (
            "The only possible value for the limit is \\sqrt{a}",
            [("text", "The only possible value for the limit is"), ("math", "\\sqrt{a}")],
        ),
        ("", []),
    ],
)
def test_answers_are_cut_into_text_and_math(answer: str, segments: list[tuple[str, str]]) -> None:
    assert answer_segments(answer) == segments


def test_only_a_whole_formula_is_math() -> None:
    assert answer_is_math("\\frac{2^n}{n+1}")
    assert answer_is_math("$2^n/(n+1)$")
    assert answer_is_math("2^n/(n+1)")
    assert answer_is_math("5050")
    assert not answer_is_math("sum_(k=1)^n 1/k")
    assert not answer_is_math("No integer solutions")


def test_a_hidden_character_in_a_formula_is_shown_by_its_code_point() -> None:
    assert answer_tex("\\frac{1}{2}\u202e") == "\\boxed{\\frac{1}{2}\\text{\u27e8U+202E\u27e9}}"
