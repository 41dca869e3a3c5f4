"""Canonical string form of an answer: equal strings mean equal answers.

The cheap first check before anything symbolic: commas in numbers, ``\\!``, ``\\dfrac``,
units, degrees, percentages, dollars, ``x =`` prefixes, choice letters. Also used to
group equal answers for majority voting.
"""

from __future__ import annotations

import re

_TEXT_COMMANDS = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_ASSIGNMENT = re.compile(r"^\\?[a-zA-Z][a-zA-Z0-9_]*(?:\([a-z]\))?\s*=\s*(?P<rhs>[^=]+)$")
# A number, whitespace, then a word of 2+ letters: "10 cm", "4 inches" (after \text{}
# unwrapping). The whitespace is required so "3x" keeps its variable.
_UNIT_SUFFIX = re.compile(r"^(?P<number>[-+]?[\d.,/\\{}a-z^]*\d[\d.,/\\{}^]*)\s+(?P<unit>[a-zA-Z]{2,}[a-zA-Z .]*)$")
_NUMBERISH = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)$")
_CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")


def _fix_shorthand_fracs(text: str) -> str:
    # MATH writes \frac12 and \frac1{2}; sympy-bound parsing wants both arguments braced.
    text = re.sub(r"\\frac\s*(\d)\s*(\d)", r"\\frac{\1}{\2}", text)
    text = re.sub(r"\\frac\s*(\d)\s*\{", r"\\frac{\1}{", text)
    text = re.sub(r"\\frac\s*\{([^{}]*)\}\s*(\d)", r"\\frac{\1}{\2}", text)
    return re.sub(r"\\sqrt\s*(\w)", r"\\sqrt{\1}", text)


def normalize_answer(answer: str) -> str:
    """Canonical LaTeX-ish form; equal strings here mean equal answers."""
    text = answer.strip()
    for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(opener) and text.endswith(closer) and len(text) >= len(opener) + len(closer):
            text = text[len(opener) : len(text) - len(closer)].strip()
    text = text.replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\ ", " ")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = re.sub(r"\^\s*\{?\s*\\circ\s*\}?", "", text)
    text = text.replace("\\circ", "").replace("°", "")
    text = text.replace("\\$", "").replace("$", "")
    text = text.replace("\\%", "").replace("%", "")
    previous = None
    while previous != text:  # unwrap nested \text{\textbf{..}}
        previous = text
        text = _TEXT_COMMANDS.sub(r"\1", text)
    text = re.sub(r"\s*(degrees?|deg)\s*$", "", text, flags=re.IGNORECASE)
    text = text.strip().rstrip(".").strip()
    assignment = _ASSIGNMENT.match(text)
    if assignment:
        text = assignment.group("rhs").strip()
    unit = _UNIT_SUFFIX.match(text)
    if unit and unit.group("unit").split()[0].lower() not in ("or", "and"):
        text = unit.group("number")
    if _THOUSANDS.match(text.replace(" ", "")):
        text = text.replace(",", "").replace(" ", "")
    text = _fix_shorthand_fracs(text)
    choice = _CHOICE.match(text)
    if choice:
        text = choice.group(1)
    text = re.sub(r"\s+", "", text)
    if _NUMBERISH.match(text):
        text = _canonical_number(text)
    return text


def _canonical_number(text: str) -> str:
    if "." not in text:
        return str(int(text))
    whole, _, fraction = text.partition(".")
    fraction = fraction.rstrip("0")
    whole = str(int(whole or "0")) if whole not in ("-", "+") else f"{whole}0"
    return f"{whole}.{fraction}" if fraction else whole
