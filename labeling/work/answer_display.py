"""How a reference answer is shown: prose as text, formulas as math (pure; no ORM).

Reference answers are often sentences ("The limit exists and is equal to 3"); typeset
whole as math, their spaces vanish and the words turn into italic variables. An answer
is cut into segments: what is inside $...$, \\(...\\) or \\[...\\] is math; otherwise a run
of prose words (two or more letters, not a function name such as sqrt) is text, and
everything between them (numbers, "x=16", "sqrt(a)", "(a^3+2b)/(3a)") is math.
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["text", "math"]
Segment = tuple[Kind, str]

_DELIMITED = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
# Names that are math however many letters they have.
_MATH_WORDS = frozenset(
    {"sqrt", "sum", "prod", "log", "ln", "lg", "sin", "cos", "tan", "cot", "sec", "csc", "exp", "lim", "max", "min"}
    | {"gcd", "lcm", "mod", "arcsin", "arccos", "arctan", "floor", "ceil", "binom", "frac", "pi", "inf"}
)
_PUNCTUATION = "()[].,;:!?\"'"


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
