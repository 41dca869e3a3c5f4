"""Reading a reference answer into the forms an answer may take to match it.

Reference answers in competition data are often sentences: "C(10, 5), or equivalently
252", "100 (i.e., all values)", "3 is the only possible value", "The limit exists and
is equal to 3", "No integer solutions", "x=0, y=2 and x=9, y=11". A reference is read
into alternatives, any one of which an answer may match:

* "X, or equivalently Y" / "X, or an equivalent form such as Y" / "X, or approximately Y"
  and "X (i.e., Y)" / "X (Y)": both X and Y;
* "X is the only possible value", "The only possible value ... is X", "The limit
  exists and is equal to X": X;
* "Yes" / "No" (a yes/no question); "Yes, and <detail>": yes, with the detail's values;
* statements that there is nothing ("No integer solutions", "It is not possible",
  "The sequence does not exist"): none;
* "all values" / "all numbers" / "all of them": all; "Infinitely many ...": infinitely many;
* a count with its unit ("98 values", "2 inequalities", "0 roots", "n times",
  "At least 1 number", "Exactly one"): the number and its bound (exactly, at least,
  at most): a count in words must have the same number and a bound that fits;
* a formula, a list or a set of solutions ("376 and 625", "x=±1", "(x=8, y=2), (x=2, y=8)"):
  a value (compared as sets of solutions in ``comparison``);
* anything else in words ("Monotonically increasing", "x(n)<y(n-1) for all n≥3"): text,
  compared word by word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from mathtext import claims
from mathtext.notation import NUMBER_WORDS, plain_unicode


class Kind(StrEnum):
    YES = "yes"
    NO = "no"
    NONE = "none"
    ALL = "all"
    INFINITE = "infinitely many"
    VALUE = "value"
    TEXT = "text"


@dataclass(frozen=True)
class Form:
    kind: Kind
    # VALUE: the formula (plain text or LaTeX); TEXT: the words; YES: a detail the
    # answer must also give ("Yes, and the sequence is 1/8, 1/64, ..."); else "".
    text: str = ""
    # VALUE that is a count ("Exactly one", "At least 1 number", "98 values"): its bound
    # (a plain count is exact); None for any other value.
    bound: claims.Bound | None = None


_ALTERNATIVE = re.compile(
    r",?\s*\bor (?:equivalently|an equivalent form(?: such as)?|approximately|about)\b\s*",
    re.IGNORECASE,
)
_PAREN_LEAD = re.compile(r"^(?:i\.e\.,?|that is,?|e\.g\.,?)\s*", re.IGNORECASE)
_ONLY_VALUE = re.compile(
    r"^(?:(?P<before>.+?) is the only (?:possible )?(?:value|solution|answer)|"
    r"the only possible (?:value|solution)s?(?: for [\w\s]+?)? (?:is|are) (?P<after>.+))$",
    re.IGNORECASE,
)
_LIMIT = re.compile(r"^the limit (?:exists and )?(?:is )?(?:equal to|equals|is) (?P<value>.+)$", re.IGNORECASE)
_YES_DETAIL = re.compile(
    r"^yes\W+(?:and\s+)?(?:the \w+ (?:is|are)\s+)?(?P<detail>.+?)[\s,.]*(?:\.\.\.)?$", re.IGNORECASE
)
_COUNT = re.compile(
    r"^(?:(?P<bound>at least|at most|exactly|only)\s+)?(?P<count>\d+|[a-z]|"
    + "|".join(NUMBER_WORDS)
    + r")(?:\s+(?P<unit>[a-zA-Z][a-zA-Z\s-]*))?$",
    re.IGNORECASE,
)
_ALL_WORDS = re.compile(r"^(?:i\.e\.,?\s*)?all (?:values|numbers|of them|terms|integers|such values)$", re.IGNORECASE)
_EXCEPT = re.compile(r"\ball except\b", re.IGNORECASE)
_INFINITE = re.compile(r"^infinitely many\b", re.IGNORECASE)
# A word of prose in a formula-like reference: three or more letters, not a function name.
_PROSE_WORD = re.compile(
    r"\b(?!(?:sqrt|floor|ceil|sum|mod|log|sin|cos|tan|exp|binom|frac|cdot|pm|le|ge|and)\b)[a-zA-Z]{3,}\b"
)


def _trailing_remark(text: str) -> tuple[str, str] | None:
    """'100 (i.e., all values)' -> ('100', 'all values'): a closing parenthesis in words."""
    if not text.endswith(")"):
        return None
    depth = 0
    for index in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[index], 0)
        if depth == 0:
            head, inner = text[:index].strip(), _PAREN_LEAD.sub("", text[index + 1 : -1]).strip()
            if head and _PROSE_WORD.search(inner):
                return head, inner
            return None
    return None


def _alternatives(reference: str) -> list[str]:
    parts = [part.strip() for part in _ALTERNATIVE.split(reference) if part.strip()]
    expanded: list[str] = []
    for part in parts:
        remark = _trailing_remark(part)
        expanded.extend(remark if remark else [part])
    return expanded


def _form(text: str) -> list[Form]:
    text = text.strip().rstrip(".").strip()
    lowered = text.lower()
    if lowered in ("yes", "no"):
        return [Form(Kind(lowered))]
    yes_detail = _YES_DETAIL.match(text)
    if yes_detail:
        return [Form(Kind.YES, yes_detail.group("detail").strip())]
    only = _ONLY_VALUE.match(text)
    if only:
        return _form(only.group("before") or only.group("after"))
    limit = _LIMIT.match(text)
    if limit and claims.polarity(text) != claims.Polarity.NO:
        return _form(limit.group("value"))
    if _ALL_WORDS.match(text):
        return [Form(Kind.ALL)]
    if _INFINITE.match(text):
        return [Form(Kind.INFINITE)]
    if claims.says_none(text):
        forms = [Form(Kind.NONE)]
        count = _COUNT.match(text)
        if count:  # "At most 0 integer-valued zeros"
            forms.append(Form(Kind.VALUE, _number(count.group("count")), _bound(count)))
        return forms
    count = _COUNT.match(text)
    if count and not _EXCEPT.search(text):
        number = _number(count.group("count"))
        forms = [Form(Kind.VALUE, number, _bound(count))]
        if number == "0" and count.group("unit"):  # "0 pairs": there are none
            forms.append(Form(Kind.NONE))
        return forms
    if _PROSE_WORD.search(_strip_math_words(text)):
        return [Form(Kind.TEXT, text)]
    return [Form(Kind.VALUE, text)]


def _strip_math_words(text: str) -> str:
    return re.sub(r"\b(?:sum|prod)_\S*", " ", text)


def _bound(count: re.Match[str]) -> claims.Bound | None:
    """A count in words is exact unless bounded; a bare number ("239") is a plain value."""
    bound = count.group("bound")
    if bound:
        return claims.BOUND_WORDS[bound.lower()]
    return claims.Bound.EXACTLY if count.group("unit") or count.group("count").lower() in NUMBER_WORDS else None


def _number(word: str) -> str:
    return str(NUMBER_WORDS.get(word.lower(), word))


def read_reference(reference: str) -> tuple[Form, ...]:
    """The forms an answer may take to match ``reference`` (a bare reference answer)."""
    text = " ".join(plain_unicode(reference).split())
    forms: list[Form] = []
    for alternative in _alternatives(text):
        for form in _form(alternative):
            if form not in forms:
                forms.append(form)
    return tuple(forms)
