"""What an answer in words claims: yes or no, "there are none", "all of them", "infinitely many".

About three answers in ten on competition data are words, not formulas ("No",
"It is not possible", "1964 is not a prime number", "for all 1000 values"). These
rules read them the way a grader reads a conclusion:

* **yes / no**: a leading "Yes" or "No" decides. Otherwise a statement is negative
  when its main clause is negated an odd number of times ("is not", "cannot",
  "impossible", "there are no", "does not exist", ...) and positive when it is a
  statement with a verb and no such negation. A bare formula has no polarity.
* **none**: a negative statement that there is nothing: "no solutions", "there are
  no such values", "does not exist", "impossible", "not possible", "none".
* **all**: "all values", "all of them", "for all 1000 values", "every value", not negated.
* **infinitely many**: "infinitely many", "infinite number of", not negated.
* **hedges** ("cannot be determined", "not enough information", "inconclusive") are
  no claim at all: such an answer is graded wrong, whatever the reference.
"""

from __future__ import annotations

import re
from enum import StrEnum


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
    r"|\b(?:might|perhaps|possibly|probably|likely|seems?|appears? to)\b",
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


def _prose(text: str) -> str:
    """Words only: formulas and LaTeX commands removed, so "x \\neq 0" is not a negation."""
    text = re.sub(r"\$[^$]*\$|\\\(.*?\\\)|\\\[.*?\\\]", " ", text, flags=re.DOTALL)
    return _LATEX_COMMAND.sub(" ", text)


def is_statement(text: str) -> bool:
    """A sentence in words (it has a verb and some words), as opposed to a bare formula."""
    prose = _prose(text)
    return bool(_VERB.search(prose)) and len(_WORD.findall(prose)) >= 2


_MATH_NAMES = re.compile(r"\b(?:sqrt|floor|ceil|sum|mod|log|sin|cos|tan|exp|binom|frac|cdot|and|choose)\b")


def has_prose(text: str) -> bool:
    """Words other than math names: "all the integers from 0 to n" is prose, "sqrt(3)/3" is not."""
    return bool(_WORD.search(_MATH_NAMES.sub(" ", _prose(text))))


def hedges(text: str) -> bool:
    return bool(_HEDGE.search(_prose(text)))


def _negations(text: str) -> int:
    prose = _QUALIFIER_NEGATION.sub(" ", _prose(text))
    return len(_NEGATORS.findall(prose))


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
    if negations or is_statement(text):
        return Polarity.YES
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
