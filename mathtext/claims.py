"""What an answer in words claims: yes or no, "there are none", "all of them", "infinitely many".

About three answers in ten on competition data are words, not formulas ("No",
"It is not possible", "1964 is not a prime number", "for all 1000 values"). These
rules read them the way a grader reads a conclusion:

* **yes / no**: a leading "Yes" or "No" decides. Otherwise a statement is negative
  when its main clause is negated an odd number of times ("is not", "cannot",
  "impossible", "there are no", "does not exist", ...) and positive when it is a
  statement with a verb and no such negation, or a formula asserting an inequality
  ("a_9000 > 30", "x_n \\ne 0 for all n"). A bare value or equation has no polarity.
* **none**: a negative statement that there is nothing: "no solutions", "there are
  no such values", "does not exist", "impossible", "not possible", "none".
* **all**: "all values", "all of them", "for all 1000 values", "every value", not negated.
* **infinitely many**: "infinitely many", "infinite number of", not negated.
* **hedges** ("cannot be determined", "not enough information", "inconclusive") are
  no claim at all: such an answer is graded wrong, whatever the reference.
* **counts**: "at most two of the numbers can be greater than 1" claims a count (at most
  2) of what it names, not the value 1; "exactly one", "only one", "at least one of the
  three numbers", "none of them" (0). A value after a comparison ("greater than 1/15",
  "divisible by 5") is what the count or the statement is compared with, never the
  answer itself (``COMPARISON``).

A statement's polarity is read from the statement alone. Where the question decides it,
it cannot be read: "there are infinitely many composite numbers" answers "Can there be
finitely many?" with no, and "A is less than 0.1" answers "Is A greater than 0.1?" with
no, but both read as positive statements here (the grader is given the reference answer,
not the question), so such an answer is graded as a yes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from mathtext.notation import NUMBER_WORDS


class Polarity(StrEnum):
    YES = "yes"
    NO = "no"


_HEDGE = re.compile(
    r"\b(?:cannot|can't|can ?not|unable to|impossible to|not possible to|difficult to|hard to|not)\s+"
    r"(?:\w+ly\s+)?(?:be\s+)?(?:determined?|decided?|conclude|say|know|tell|establish|answer|confirm|prove|verify|"
    r"find|found|compute|calculated?)\b"
    r"|\bnot enough information\b|\binconclusive\b|\bundetermined\b|\bunclear\b|\bmay or may not\b"
    r"|\bit depends\b|\bdepends on\b|\bwithout (?:further|more|additional|a|an)\b[^.]*\b(?:information|analysis|"
    r"computation|calculation|knowledge|testing|checking|tools?)\b|\bit(?:'s| is) (?:possible|likely|unlikely) that\b"
    r"|\b(?:might|perhaps|possibly|probably|likely|seems?|appears? to)\b"
    r"|\b(?:would|will) (?:need|have) to\b|\brequires? (?:further|more|additional)\b",
    re.IGNORECASE,
)
_NEGATORS = re.compile(
    r"\b(?:not|no|none|never|cannot|can't|impossible|neither|nor|nothing|isn't|aren't|doesn't|don't|didn't|"
    r"won't|wouldn't|couldn't|shouldn't|wasn't|weren't|hasn't|haven't|nonexistent|non-existent|false|untrue|"
    r"incorrect)\b",
    re.IGNORECASE,
)
# Negations inside a qualifier do not negate the claim: "non-negative", "not all zero",
# "no two adjacent", "not divisible by 3 is 67" are about the subject.
_QUALIFIER_NEGATION = re.compile(
    r"\bnon-\w+|\bno two\b|\bnot all\b|\bnot both\b|\bnot necessarily\b|\bnot only\b|\bnot equal to\b",
    re.IGNORECASE,
)
_VERB = re.compile(
    r"\b(?:is|are|was|were|be|been|can|could|does|do|did|has|have|had|will|would|must|should|may|might|"
    r"exists?|holds?|satisf\w+|works?|contains?|converges?|diverges?|divides?|equals?|becomes?|remains?|"
    r"increases?|decreases?|grows?|lies?|occurs?|appears?|gives?|makes?|results?|yields?|tends?|approaches?)\b",
    re.IGNORECASE,
)
_LEADING_YES_NO = re.compile(r"^\W*(yes|no)\b(?!\s+(?:more|less|two|other)\b)", re.IGNORECASE)
# Not a formula: a letter word of three letters or more.
_WORD = re.compile(r"\b[a-zA-Z]{3,}\b")
_LATEX_COMMAND = re.compile(r"\\[a-zA-Z]+")

_NONE = re.compile(
    r"\b(?:no|none|never|zero)\b|\bnot? (?:possible|exist\w*)\b|\bimpossible\b|\bcannot (?:exist|be (?:found|"
    r"constructed|achieved|satisfied|done|possible|made))\b|\bdoes(?: not|n't) (?:exist|have)\b|"
    r"\bdo(?: not|n't) (?:exist|have)\b|\bthere (?:is|are) no\b|\bnonexistent\b|\bnon-existent\b|\bempty\b",
    re.IGNORECASE,
)
_ALL = re.compile(
    r"\ball (?:of (?:them|these|those|the)\b|\d[\d,]*|the|values?|numbers?|terms?|integers?|n\b|possible|such|"
    r"\$|\\\(|cases)|\bevery (?:value|number|term|integer|n\b)|\bfor all\b|\bfor every\b|\bfor each\b|\ball\b\W*$",
    re.IGNORECASE,
)
_INFINITE = re.compile(
    r"\binfinitely many\b|\binfinite(?:ly)? (?:number|amount|set)\b|\binfinite\b|\\infty", re.IGNORECASE
)


_DELIMITED = re.compile(r"\$[^$]*\$|\\\(.*?\\\)|\\\[.*?\\\]", re.DOTALL)


def _prose(text: str) -> str:
    """Words only: formulas and LaTeX commands removed, so "x \\neq 0" is not a negation."""
    return _LATEX_COMMAND.sub(" ", _DELIMITED.sub(" ", text))


def is_statement(text: str) -> bool:
    """A sentence in words (it has a verb and some words), as opposed to a bare formula.
    A delimited formula counts as a word: "$a^3+b^3+c^3$ is divisible by 6" is a statement."""
    prose = _prose(text)
    words = len(_WORD.findall(prose)) + len(_DELIMITED.findall(text))
    return bool(_VERB.search(prose)) and words >= 2


_MATH_NAMES = re.compile(r"\b(?:sqrt|floor|ceil|sum|mod|log|sin|cos|tan|exp|binom|frac|cdot|and|choose)\b")


def has_prose(text: str) -> bool:
    """Words other than math names: "all the integers from 0 to n" is prose, "sqrt(3)/3" is not."""
    return bool(_WORD.search(_MATH_NAMES.sub(" ", _prose(text))))


def hedges(text: str) -> bool:
    return bool(_HEDGE.search(_prose(text)))


def _negations(text: str) -> int:
    prose = _QUALIFIER_NEGATION.sub(" ", _prose(text))
    return len(_NEGATORS.findall(prose))


# A formula that asserts an inequality states something, as a sentence does; an equation
# ("x = 5") is more often a value than a claim, so it does not.
_INEQUALITY = re.compile(r"(?<![<>-])[<>](?![<>])|\\(?:le|ge|leq|geq|ne|neq|lt|gt)\b|[\u2264\u2265\u2260]|!=")


def polarity(text: str) -> Polarity | None:
    """Yes or no, or None when the text answers neither (a formula, a hedge)."""
    if hedges(text):
        return None
    leading = _LEADING_YES_NO.match(text)
    if leading:
        return Polarity.YES if leading.group(1).lower() == "yes" else Polarity.NO
    negations = _negations(text)
    if negations % 2:
        return Polarity.NO
    if negations or is_statement(text) or _INEQUALITY.search(text):
        return Polarity.YES  # "a_9000 > 30", "x_n \\ne 0 for all n": a claim, like one in words
    return None


def says_none(text: str) -> bool:
    """A claim that there is nothing: no solution, no such value, does not exist."""
    if hedges(text):
        return False
    prose = _QUALIFIER_NEGATION.sub(" ", _prose(text))
    return polarity(text) is Polarity.NO and bool(_NONE.search(prose))


def says_all(text: str) -> bool:
    return not hedges(text) and polarity(text) is not Polarity.NO and bool(_ALL.search(_prose(text)))


def says_infinitely_many(text: str) -> bool:
    return not hedges(text) and polarity(text) is not Polarity.NO and bool(_INFINITE.search(text))


# ------------------------------------------------------------------------ comparisons

# What follows such a phrase is what something is compared with, not an answer:
# "A is greater than 1/15", "must be divisible by 5", "can be at most 2".
COMPARISON = re.compile(
    r"(?:(?:strictly|always|still|also|even|much|not)\s+)?(?:greater|less|larger|smaller|bigger|more|fewer|higher|"
    r"lower)\s+than(?:\s+or\s+equal\s+to)?\b|(?:evenly\s+)?(?:divisible|divided)\s+by\b|"
    r"(?:an?\s+)?(?:multiple|factor|divisor)s?\s+of\b|at\s+(?:least|most)\b|bounded\s+by\b|exceeds?\b",
    re.IGNORECASE,
)


# -------------------------------------------------------------------------------- counts


class Bound(StrEnum):
    EXACTLY = "exactly"
    AT_LEAST = "at least"
    AT_MOST = "at most"


@dataclass(frozen=True)
class Count:
    """A claimed count: "at most two (of the numbers)" is Count(AT_MOST, "2"); a bare
    "two of them" is Count(None, "2")."""

    bound: Bound | None
    number: str


BOUND_WORDS = {
    "exactly": Bound.EXACTLY,
    "precisely": Bound.EXACTLY,
    "only": Bound.EXACTLY,
    "just": Bound.EXACTLY,
    "at least": Bound.AT_LEAST,
    "no fewer than": Bound.AT_LEAST,
    "no less than": Bound.AT_LEAST,
    "not fewer than": Bound.AT_LEAST,
    "not less than": Bound.AT_LEAST,
    "a minimum of": Bound.AT_LEAST,
    "at most": Bound.AT_MOST,
    "no more than": Bound.AT_MOST,
    "not more than": Bound.AT_MOST,
    "up to": Bound.AT_MOST,
    "a maximum of": Bound.AT_MOST,
}
_BOUND = "|".join(sorted((re.escape(word) for word in BOUND_WORDS), key=len, reverse=True))
_NUMBER = r"\d+|" + "|".join(NUMBER_WORDS)
# "at most two", "at least 1": a bounded count (not "at least 2^n - 1", a bounded value).
BOUNDED_COUNT = re.compile(rf"(?P<bound>{_BOUND})\s+(?P<bounded>{_NUMBER})\b(?!\s*[-+*/^=.]\s*\w)", re.IGNORECASE)
# A count is a bounded number, one that counts something after it ("two of the
# numbers", "one such sequence") or one stated at the end of a clause ("... is one,");
# not a number compared with ("greater than 1"), raised to ("z^2") or assigned
# ("n = 2 ways").
_COUNT = re.compile(
    rf"(?<![\w^=_/.-])(?:{BOUNDED_COUNT.pattern}"
    rf"|(?P<number>{_NUMBER})\s+(?=of\b|(?!than\b|by\b|or\b|and\b|to\b|mod\b)[a-z]{{2,}}\b)"
    rf"|(?<=is |be )(?P<stated>{_NUMBER})(?=\s*(?:[,.;]|$)))",
    re.IGNORECASE,
)
_NONE_OF = re.compile(r"\bnone\b|\bno (?!(?:more|less|fewer|two|other)\b)(?=[a-z]{2,})", re.IGNORECASE)
# Not a count: a number compared with ("greater than 1"), the given ones ("of the three
# numbers"), a range ("from 1 to 5"), an equation's side.
_NOT_COUNTED = re.compile(
    r"(?:\bthan|\bby|\bto|\bof|\bthe|\bthis|\bthat|\beach|\bevery|\ban?|=|\bequals?|\bfrom|\band|\bor)\s*$",
    re.IGNORECASE,
)


def _count_of(match: re.Match[str]) -> Count:
    word = (match.group("bounded") or match.group("number") or match.group("stated")).lower()
    bound = BOUND_WORDS[match.group("bound").lower()] if match.group("bound") else None
    return Count(bound, str(NUMBER_WORDS.get(word, word)))


def count_bound_in(text: str) -> bool:
    """The text holds a bounded count ("at most one zero"), wherever it is."""
    return any(match.group("bound") for match in BOUNDED_COUNT.finditer(text))


def bounded_count(text: str) -> Count | None:
    """The bounded count ``text`` starts with ("at most two ..."), or None."""
    match = BOUNDED_COUNT.match(text)
    return _count_of(match) if match and match.group("bound") else None


def count(text: str) -> Count | None:
    """The count a statement claims, or None if it claims none.

    The first count in the text is the claim ("exactly one of them is greater than 1":
    one); "none of them" and "no number" claim 0. A text without a count, or one whose
    number is compared with something ("A is greater than 1/15"), claims none.
    """
    prose = re.sub(r"\$\s*(\d+)\s*\$|\\\(\s*(\d+)\s*\\\)", lambda m: m.group(1) or m.group(2), text)
    prose = _prose(prose)
    none = _NONE_OF.search(prose) if polarity(text) is Polarity.NO else None
    for match in _COUNT.finditer(prose):
        if none is not None and none.start() < match.start():
            break
        if _NOT_COUNTED.search(prose[: match.start()]):
            continue
        return _count_of(match)
    return Count(None, "0") if none is not None else None
