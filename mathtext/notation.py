"""Math inside prose: the pieces extraction and comparison share.

Model solutions mix LaTeX (``\\(x = 3\\)``, ``$$...$$``), plain-text formulas
(``n(n-3)/2``, ``2^(n-1)``, ``C(10, 5)``) and English. This module finds where the
math is and turns plain-text math into LaTeX that ``math_verify`` parses. It is
string work only (no sympy), so the web process can import it cheaply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ----------------------------------------------------------------------------- unicode

_UNICODE = {
    "\u2212": "-",  # minus sign
    "\u2013": "-",
    "\u2014": " - ",
    "\u00d7": " \\times ",
    "\u22c5": " \\cdot ",
    "\u00b7": " \\cdot ",
    "\u2264": " \\le ",
    "\u2265": " \\ge ",
    "\u2260": " \\ne ",
    "\u00b1": "\\pm ",
    "\u221e": "\\infty ",
    "\u03c0": "\\pi ",
    "\u2208": " \\in ",
    "\u2261": " \\equiv ",
    "\u2192": " \\to ",
    "\u2019": "'",
    "\u2018": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u00a0": " ",
    "\u2026": "...",
    "\u22ef": "...",
    "\u00f7": "/",
}
_SUPERSCRIPTS = str.maketrans("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207f", "0123456789n")
_SUPERSCRIPT_RUN = re.compile("[\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207f]+")
_SQRT_SIGN = re.compile(r"\u221a\s*(\(|\{|\d+|[a-zA-Z])")


def plain_unicode(text: str) -> str:
    """ASCII/LaTeX spellings of the math symbols models write in Unicode."""
    text = _SUPERSCRIPT_RUN.sub(lambda m: "^" + m.group(0).translate(_SUPERSCRIPTS), text)
    text = _SQRT_SIGN.sub(lambda m: "sqrt" + (m.group(1) if m.group(1) in "({" else f"({m.group(1)})"), text)
    text = text.replace("\u221a", "sqrt")
    for symbol, spelled in _UNICODE.items():
        text = text.replace(symbol, spelled)
    return text


# -------------------------------------------------------------------------- math spans

# Display math first so "$$" is never read as two inline "$".
_SPAN = re.compile(
    r"\\\[(?P<bracket>.*?)\\\]|\$\$(?P<dollars>.*?)\$\$|\\\((?P<paren>.*?)\\\)|(?<!\\)\$(?P<dollar>[^$\n]+?)(?<!\\)\$",
    re.DOTALL,
)
PLACEHOLDER = re.compile(r"\x00(\d+)\x00")


@dataclass(frozen=True)
class Protected:
    """Text with every LaTeX span replaced by a placeholder ``\\x00N\\x00``.

    Sentence splitting and word scanning then never look inside a formula (a
    period in ``\\(3.5\\)`` is not a sentence end, a space in ``\\( x = 3 \\)`` is
    not a word break).
    """

    text: str
    spans: tuple[str, ...]

    def restore(self, text: str, *, delimiters: bool = True) -> str:
        def put_back(match: re.Match[str]) -> str:
            inner = self.spans[int(match.group(1))]
            return f"${inner}$" if delimiters else inner

        return PLACEHOLDER.sub(put_back, text)


def protect(text: str) -> Protected:
    spans: list[str] = []

    def replace(match: re.Match[str]) -> str:
        inner = next(group for group in match.groups() if group is not None)
        spans.append(" ".join(inner.split()))
        return f"\x00{len(spans) - 1}\x00"

    return Protected(_SPAN.sub(replace, text), tuple(spans))


# ------------------------------------------------------------------------ number words

NUMBER_WORDS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}


# ------------------------------------------------------------------------ math runs

# Words that belong to plain-text formulas rather than to the prose around them.
_MATH_WORDS = frozenset({"mod", "choose", "sqrt", "floor", "ceil", "log", "ln", "sin", "cos", "tan", "exp"})
# Between two formula tokens these keep a run going: "1, 4 and 9", "x = 0 and y = 0".
_JOINERS = frozenset({"and", "or", ",", "&"})
_OPERATOR_TOKEN = re.compile(r"^(?:[-+*/=<>^\\]|<=|>=|!=|\\[a-zA-Z]+|\(mod|\)|\()$")
_MATHY = re.compile(r"^[\w\\^_{}()\[\]+\-*/=<>!.,|'~:]+$")
_HAS_MATH_MARK = re.compile(r"[\d+\-*/=<>^_()\\!|]")
_TRAILING_PUNCT = ".,;:"
# Single letters that are usually English ("a", "I"), not variables, unless an
# operator follows them.
_ARTICLES = frozenset({"a", "A", "I"})


_ELLIPSIS = frozenset({"...", "\\cdots", "\\ldots", "\\dots"})


def _is_math_token(token: str, following: str | None, *, after_operator: bool = False) -> bool:
    core = token.rstrip(_TRAILING_PUNCT) if token not in _ELLIPSIS else token
    if not core:
        return False
    if core in _ELLIPSIS:
        return True
    if after_operator and len(core) <= 4 and core.isalnum():
        return True  # "- xy - yz": short products inside a formula
    if PLACEHOLDER.fullmatch(core):
        return True
    if core.lower() in _MATH_WORDS:
        return True
    if not _MATHY.match(core):
        return False
    if len(core) == 1 and core.isalpha():
        if core in _ARTICLES:
            return following is not None and bool(_OPERATOR_TOKEN.match(following))
        return True
    if re.fullmatch(r"[A-Za-z]+(?:-[A-Za-z]+)+", core) and max(len(p) for p in core.split("-")) > 2:
        return False  # "integer-valued", "non-negative": prose
    if _HAS_MATH_MARK.search(core):
        # "e.g." and "i.e." are prose; "(i.e.," too.
        return not re.fullmatch(r"\(?(?:e\.g|i\.e|etc)\.?,?\)?", core)
    return False


@dataclass(frozen=True)
class MathRun:
    text: str  # the formula, as written (placeholders still in)
    end_token: int  # index of the first token after the run
    reaches_end: bool  # nothing but a few words of unit follow it


# Words that may trail a value without changing it: "240 ways", "98 values of n".
UNIT_TAIL = re.compile(
    r"^(?:(?:distinct|different|such|possible|valid|integer|positive|real|total|ordered|unordered|"
    r"ways?|values?|numbers?|terms?|solutions?|pairs?|times|elements?|strings?|arrangements?|outcomes?|"
    r"integer-valued|real-valued|complex|roots?|zeros?|digits?|inequalities|sequences?|points?|triples?|quadruples?|diagonals?|"
    r"subsets?|sets?|functions?|polynomials?|integers?|units?|steps?|in\s+total|altogether|overall|"
    r"respectively|exactly|only|each|all|of|in|the|it|them|is|are|for|n|this|that|case)\b[\s,.;:]*)*$",
    re.IGNORECASE,
)


def math_run(tokens: list[str], start: int) -> MathRun | None:
    """The formula starting at ``tokens[start]``, or None if no formula starts there.

    A run continues over formula tokens, lone operators and the joiners "and",
    "or" and commas when a formula token follows them; it ends at the first prose
    word or at sentence punctuation.
    """
    index = start
    parts: list[str] = []
    while index < len(tokens):
        token = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        after_operator = bool(parts) and bool(_OPERATOR_TOKEN.match(parts[-1]))
        if _is_math_token(token, following, after_operator=after_operator):
            core = token.rstrip(_TRAILING_PUNCT) if token not in _ELLIPSIS else token
            parts.append(core)
            index += 1
            trailing = token[len(core) :]
            if (
                trailing
                and trailing[0] in ".;:"
                and not (trailing[0] == ":" and following is not None and PLACEHOLDER.fullmatch(following.rstrip(".")))
            ):
                break  # a sentence or clause ends here
            if trailing.startswith(","):
                # A comma continues a list only when another formula follows, or "and"
                # and then a formula ("1, 4, and 9").
                after = tokens[index + 1] if index + 1 < len(tokens) else None
                joined = following is not None and following.lower() in _JOINERS and after is not None
                if not (
                    (following is not None and _is_math_token(following, None))
                    or (joined and after is not None and _is_math_token(after, None))
                ):
                    break
                parts.append(",")
            continue
        if parts and token.lower() in _JOINERS and following is not None and _is_math_token(following, None):
            parts.append(token.lower())
            index += 1
            continue
        break
    if not parts:
        return None
    text = " ".join(parts).replace(" ,", ",")
    rest = " ".join(tokens[index:])
    return MathRun(text=text, end_token=index, reaches_end=bool(UNIT_TAIL.match(rest)))


# ------------------------------------------------------------------- plain text to LaTeX

_FUNCTION_CALL = re.compile(r"\b(sqrt|floor|ceil|C|binom)\s*\(")


def _matching_paren(text: str, open_index: int) -> int | None:
    depth = 0
    for index in range(open_index, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    return None


def _rewrite_calls(text: str) -> str:
    """sqrt(x) -> \\sqrt{x}, floor(x) -> \\lfloor x\\rfloor, C(n, k) -> \\binom{n}{k}."""
    while True:
        match = _FUNCTION_CALL.search(text)
        if match is None:
            return text
        open_index = match.end() - 1
        close = _matching_paren(text, open_index)
        if close is None:
            return text
        inner = text[open_index + 1 : close]
        name = match.group(1)
        if name == "sqrt":
            replacement = f"\\sqrt{{{inner}}}"
        elif name in ("floor", "ceil"):
            left, right = ("\\lfloor", "\\rfloor") if name == "floor" else ("\\lceil", "\\rceil")
            replacement = f"{left} {inner}{right}"
        else:
            arguments = split_top_level(inner, ",")
            if len(arguments) != 2:
                return text
            replacement = f"\\binom{{{arguments[0].strip()}}}{{{arguments[1].strip()}}}"
        text = text[: match.start()] + replacement + text[close + 1 :]


def split_top_level(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside brackets and braces."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)  # an unmatched closer ("toys) = 240") opened nothing
        if depth == 0 and text.startswith(separator, index):
            parts.append("".join(current))
            current = []
            index += len(separator)
            continue
        current.append(char)
        index += 1
    parts.append("".join(current))
    return parts


_CARET_PAREN = re.compile(r"\^\s*\(")
_CHOOSE = re.compile(r"(\w+|\([^()]*\))\s+choose\s+(\w+|\([^()]*\))")


def to_latex(text: str) -> str:
    """A plain-text or mixed formula as LaTeX that ``math_verify`` parses.

    ``2^(n-1)`` -> ``2^{n-1}``, ``sqrt(3)`` -> ``\\sqrt{3}``, ``C(10, 5)`` and ``10 choose 5`` ->
    ``\\binom{10}{5}``, ``floor(n/2)`` -> ``\\lfloor n/2\\rfloor``, ``*`` -> ``\\cdot``.
    LaTeX already in the text is kept.
    """
    text = plain_unicode(text)
    text = _CHOOSE.sub(lambda m: f"C({m.group(1)}, {m.group(2)})", text)
    text = _rewrite_calls(text)
    # x^(n-1): the exponent is the whole parenthesised group.
    while (match := _CARET_PAREN.search(text)) is not None:
        close = _matching_paren(text, match.end() - 1)
        if close is None:
            break
        text = text[: match.start()] + "^{" + text[match.end() : close] + "}" + text[close + 1 :]
    text = text.replace("**", "^").replace("*", " \\cdot ")
    text = re.sub(r"\.\.\.|\\ldots\b|\\dots\b", r"\\cdots ", text)
    text = re.sub(r"(?<![\\a-zA-Z])pi\b", r"\\pi", text)
    text = re.sub(r"(?<![\\a-zA-Z])infinity\b", r"\\infty", text)
    return " ".join(text.split())
