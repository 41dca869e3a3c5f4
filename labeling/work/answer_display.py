"""How a reference answer is shown: LaTeX typeset as math, everything else as the text it is (pure; no ORM).

Reference answers come in four kinds. Delimited math ($...$, \\(...\\), \\[...\\]) is
typeset and the text around it shown as text. Undelimited LaTeX ("\\frac{1}{2}",
"2^{10}", "The limit is \\sqrt{a}") is recognised by its commands and braced scripts:
runs of prose words (two or more letters, not a function name such as sqrt) are text,
everything between them math. A plain formula that TeX reads as it is written (numbers,
one-letter variables, operators, brackets, one-character scripts: "4^n", "2^n/(n+1)",
"x=16") is typeset whole. Anything else is plain text ("sum_(k=1)^n 1/k", "sqrt(3)",
"x^10", "x=16 and x=81"): typeset, its words would turn into italic variables and its
brackets and long scripts into wrong sub- and superscripts, so it is shown as written.
"""

from __future__ import annotations

import re
from typing import Literal

from labeling.data.display import is_hidden_character

Kind = Literal["text", "math"]
Segment = tuple[Kind, str]

_DELIMITED = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
# Names that are math however many letters they have.
_MATH_WORDS = frozenset(
    {"sqrt", "sum", "prod", "log", "ln", "lg", "sin", "cos", "tan", "cot", "sec", "csc", "exp", "lim", "max", "min"}
    | {"gcd", "lcm", "mod", "arcsin", "arccos", "arctan", "floor", "ceil", "binom", "frac", "pi", "inf"}
)
_PUNCTUATION = "()[].,;:!?\"'"
# What only LaTeX writes: a command (\frac, \sqrt, \pi, \{) or a braced script (x^{2}, a_{n}).
_LATEX = re.compile(r"\\[A-Za-z{}|,;!]|[\^_]\{")
# A plain formula TeX typesets as meant: these characters only, no word (two letters or
# more), and every script one character long (TeX raises only the first of "x^10").
_PLAIN_FORMULA = re.compile(r"[0-9A-Za-z+\-*/=<>().,!|\s^_]+")
_WORD = re.compile(r"[A-Za-z]{2,}")
_LONG_OR_EMPTY_SCRIPT = re.compile(r"[\^_](?![A-Za-z0-9](?![A-Za-z0-9]))")


def _is_prose(token: str) -> bool:
    bare = token.strip(_PUNCTUATION).replace(".", "").replace("-", "").replace("'", "")
    return len(bare) >= 2 and bare.isalpha() and bare.isascii() and bare.lower() not in _MATH_WORDS


def answer_segments(answer: str) -> list[Segment]:
    """The answer as (kind, text) segments in order; adjacent segments of one kind are merged."""
    answer = answer.strip()
    if not answer:
        return []
    if _DELIMITED.search(answer):
        segments: list[Segment] = []
        cursor = 0
        for match in _DELIMITED.finditer(answer):
            if match.start() > cursor:
                segments.append(("text", answer[cursor : match.start()]))
            segments.append(("math", next(g for g in match.groups() if g is not None)))
            cursor = match.end()
        if cursor < len(answer):
            segments.append(("text", answer[cursor:]))
        return [(kind, text.strip()) for kind, text in segments if text.strip()]
    if not _LATEX.search(answer):
        plain_formula = (
            _PLAIN_FORMULA.fullmatch(answer) and not _WORD.search(answer) and not _LONG_OR_EMPTY_SCRIPT.search(answer)
        )
        return [("math" if plain_formula else "text", answer)]
    merged: list[tuple[Kind, list[str]]] = []
    for token in answer.split():
        kind: Kind = "text" if _is_prose(token) else "math"
        if merged and merged[-1][0] == kind:
            merged[-1][1].append(token)
        else:
            merged.append((kind, [token]))
    return [(kind, " ".join(tokens)) for kind, tokens in merged]


def answer_is_math(answer: str) -> bool:
    """True when the whole answer is one formula (it is then shown boxed, as a formula)."""
    segments = answer_segments(answer)
    return len(segments) == 1 and segments[0][0] == "math"


def answer_tex(answer: str) -> str:
    """A whole-formula answer as the boxed TeX shown; a hidden character (bidi control, zero width) as its code."""
    tex = "".join(f"\\text{{\u27e8U+{ord(ch):04X}\u27e9}}" if is_hidden_character(ch) else ch for ch in answer)
    return "\\boxed{" + tex + "}"
