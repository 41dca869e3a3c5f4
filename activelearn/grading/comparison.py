"""Is an answer right? The verdict for one (answer, reference) pair.

1. The answer is extracted (``extraction``); none found is its own outcome, "no answer
   found", never "different".
2. The reference is read into the forms that match it (``references``).
3. A form matches when:

   * **value**: both sides read as the same set of solutions. A formula or list is split
     into solutions ("x=0, y=2 and x=9, y=11" is two; "x=±1" is two; "376 and 625" is
     two), names are compared when both sides name more than one unknown (an answer
     "6, 5" is read in the reference's order x, y), and each pair of values is equal
     after string normalisation or, failing that, by ``math_verify`` (symbolic).
     An answer in words matches a value when it holds exactly one formula and that
     formula matches.
   * **count** ("Exactly one", "At least 1 number", "98 values"): an answer in words that
     claims a count (``claims.count``) must claim the same number with a bound that fits:
     the same bound, or none, or "exactly" for a reference bounded above or below ("at
     most two" is not "exactly one"; "exactly one" answers "at least 1"). Otherwise, as
     a value.
   * **yes / no / none / all / infinitely many**: the answer claims the same
     (``claims``); a hedge claims nothing.
   * **text**: the answer has the reference's polarity, every content word of it
     (generic nouns such as "sequence", "limit", "function" and the adverbs
     "monotonically", "strictly" may be left out) and every formula in it.

This module must not import Django or torch: the spawned grading processes import it.
sympy (through ``math_verify``) is imported only when a symbolic check is needed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from activelearn.grading.normalization import normalize_answer
from activelearn.grading.references import Form, Kind, read_reference
from mathtext import claims
from mathtext.extraction import answer_of_formula, extract_final_answer
from mathtext.notation import math_run, plain_unicode, protect, split_top_level, to_latex

DEFAULT_TIMEOUT_S = 5.0

# Reasons (GradeResult.reason); the first four are the verdicts a grader gives itself.
NORMALIZED_MATCH = "normalized-match"
EQUIVALENT = "equivalent"
SAME_MEANING = "same meaning"
DIFFERENT = "different"
NO_ANSWER = "no answer found"
TIMEOUT = "timeout"
ERROR_PREFIX = "error: "


@dataclass(frozen=True)
class GradeResult:
    correct: bool
    # NORMALIZED_MATCH, EQUIVALENT, SAME_MEANING ("yes/no", "none", "all", "text") and
    # DIFFERENT are verdicts; NO_ANSWER, TIMEOUT and "error: ..." are not.
    reason: str

    @property
    def answered(self) -> bool:
        """False when the solution states no final answer (not the same as a wrong one)."""
        return self.reason != NO_ANSWER


Grader = Callable[[str, str], GradeResult]


# ------------------------------------------------------------------------- solutions

# One solution: (unknown, value) pairs; the unknown is None for a bare value.
Solution = tuple[tuple[str | None, str], ...]

_SET_BRACES = re.compile(r"^\\?\{(?P<inner>.*)\\?\}$")
_NAME = re.compile(r"^\s*(?P<name>\\?[a-zA-Z](?:_\{?\w+\}?)?(?:\(\s*[a-zA-Z0-9]+\s*\))?)\s*$")
_MEMBERSHIP = re.compile(r"^\s*\\?[a-zA-Z]\s*\\in\s*")
_PLUS_MINUS = re.compile(r"\\pm\b|\+-|\+/-")
_DOUBLE_INEQUALITY = re.compile(
    r"^\s*(?P<low>[^<>]+?)\s*(?P<lop>\\le(?:q)?|<=|<)\s*[a-zA-Z]\s*(?P<hop>\\le(?:q)?|<=|<)\s*(?P<high>[^<>]+?)\s*$"
)


_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")


def _items(formula: str) -> list[str]:
    text = formula.strip().rstrip(".")
    if _THOUSANDS.match(text.replace("\\!", "")):
        return [text.replace("\\!", "").replace(",", "")]  # 1,000,000 is one number
    text = _MEMBERSHIP.sub("", text)
    braces = _SET_BRACES.match(text)
    if braces:
        text = braces.group("inner")
    text = text.replace("&", " ").replace("\\\\", " ")
    text = re.sub(r"\\quad|\\qquad|;|\band\b|\bor\b", ",", text)
    return [item.strip() for item in split_top_level(text, ",") if item.strip()]


def _expand_plus_minus(value: str) -> list[str]:
    match = _PLUS_MINUS.search(value)
    if not match:
        return [value]
    head, tail = value[: match.start()], value[match.end() :]
    if not head.strip() or head.rstrip().endswith(("(", "=", ",")):
        return [head + tail, head + "-" + tail]
    return [head + "+" + tail, head + "-" + tail]


def _interval(value: str) -> str:
    """-1 <= x <= 1 -> [-1, 1]."""
    match = _DOUBLE_INEQUALITY.match(value)
    if not match:
        return value
    left = "(" if match.group("lop") == "<" else "["
    right = ")" if match.group("hop") == "<" else "]"
    return f"{left}{match.group('low')}, {match.group('high')}{right}"


_TUPLE_NAMES = re.compile(r"^\s*\(\s*(?P<names>[a-zA-Z](?:\s*,\s*[a-zA-Z])+)\s*\)\s*=\s*(?P<rest>.+)$")


def _tuple_solutions(formula: str) -> list[Solution] | None:
    """'(x, y) = (2, 1), (1, 2)' -> [((x, 2), (y, 1)), ((x, 1), (y, 2))]; None if not that form."""
    match = _TUPLE_NAMES.match(formula)
    if not match:
        return None
    names = [name.strip() for name in match.group("names").split(",")]
    solutions: list[Solution] = []
    for item in _items(match.group("rest")):
        inner = re.fullmatch(r"\((.*)\)", item.strip())
        values = [v.strip() for v in split_top_level(inner.group(1), ",")] if inner else []
        if len(values) != len(names):
            return None
        solutions.append(tuple((name, value) for name, value in zip(names, values, strict=True)))
    return solutions


def solutions_of(formula: str) -> list[Solution]:
    """'x=0, y=2 and x=9, y=11' -> [((x, 0), (y, 2)), ((x, 9), (y, 11))]; 'x=±1' -> two."""
    tuples = _tuple_solutions(formula)
    if tuples is not None:
        return tuples
    solutions: list[list[tuple[str | None, str]]] = []
    last_name: str | None = None
    for item in _items(formula):
        tuple_inner = re.fullmatch(r"\((.*=.*)\)", item)
        if tuple_inner:  # "(x=8, y=2)"
            pairs = [_assignment(part) for part in split_top_level(tuple_inner.group(1), ",")]
            solutions.append([pair for pair in pairs if pair is not None])
            last_name = None
            continue
        assignment = _assignment(item)
        if assignment is None:
            if last_name is not None and solutions and len(solutions[-1]) == 1:
                solutions.append([(last_name, item)])  # "x = ±1, ±2": more values of x
            else:
                solutions.append([(None, item)])
            continue
        names = assignment[0].split("\x02")
        value = assignment[1]
        current = solutions[-1] if solutions else None
        if current is None or any(n == name for n, _ in current for name in names) or current[0][0] is None:
            solutions.append([])
        for name in names:
            solutions[-1].append((name, value))
        last_name = names[0] if len(names) == 1 else None
    expanded: list[Solution] = []
    for solution in solutions:
        variants: list[list[tuple[str | None, str]]] = [[]]
        for unknown, value in solution:
            variants = [[*v, (unknown, choice)] for v in variants for choice in _expand_plus_minus(_interval(value))]
        expanded.extend(tuple(v) for v in variants if v)
    return expanded


def _assignment(item: str) -> tuple[str, str] | None:
    """'x = 3' -> ('x', '3'); 'x = y = 0' -> ('x\\x02y', '0'); None if not an assignment."""
    parts = split_top_level(re.sub(r"(?<![<>!\\])=(?!=)", "\x01", item), "\x01")
    if len(parts) < 2:
        return None
    names = [part.strip() for part in parts[:-1]]
    if not all(_NAME.match(name) for name in names):
        return None
    return "\x02".join(names), parts[-1].strip()


# ----------------------------------------------------------------------- equal values

_SUM = re.compile(r"\bsum_\(?\s*(\w)\s*=\s*([^)\s]+)\s*\)?\s*\^\s*\(?(\w+)\)?\s*")


def _latex(value: str) -> str:
    value = _SUM.sub(lambda m: f"\\sum_{{{m.group(1)}={m.group(2)}}}^{{{m.group(3)}}} ", value)
    return to_latex(value)


# A relation is not a value: "P(x) \\le 0" does not answer "0".
_RELATION = re.compile(r"\\(?:le|ge|leq|geq|ne|neq|lt|gt)\b|[<>]|\\not")


def _parsed(latex: str) -> Any:
    """The sympy value of exactly this LaTeX (no search for a formula inside it), or None."""
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig, latex2sympy, normalize_latex
    from math_verify.grader import should_treat_as_complex

    config = NormalizationConfig(
        basic_latex=True, units=True, malformed_operators=True, nits=True, boxed="all", equations=False
    )
    normalized = normalize_latex(latex, config=config)
    try:
        return latex2sympy(
            normalized,
            is_real=not should_treat_as_complex(normalized),
            convert_degrees=False,
            normalization_config=None,
        )
    except Exception:
        return None


def _factors(expression: Any) -> list[Any] | None:
    """The factors of a factorisation ("(x^2+x+1)(x^2-x+1)"): a product of two or more
    sums; None for anything else, including "n(n+1)2^{n-2}"."""
    from sympy import Add, Mul

    if not isinstance(expression, Mul):
        return None
    factors = [factor for factor in Mul.make_args(expression) if not factor.is_number]
    if len(factors) < 2 or not all(isinstance(factor, Add) for factor in factors):
        return None
    return factors


def _same_factors(answer: Any, reference: Any) -> bool:
    from sympy import expand

    given = _factors(answer)
    if given is None or len(given) != len(reference):
        return False
    unmatched = list(reference)
    for factor in given:
        match = next((r for r in unmatched if expand(factor - r) == 0 or expand(factor + r) == 0), None)
        if match is None:
            return False
        unmatched.remove(match)
    return True


def _symbolic_equal(left: str, right: str) -> bool:
    # Imported here so the Django process, which only extracts answers, never pays for sympy.
    from math_verify import verify

    # The timeouts are disabled on purpose (see below); its warning about that is noise.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gold, target = _parsed(_latex(right)), _parsed(_latex(left))
    if gold is None or target is None:
        return False
    gold, target = _evaluated(gold), _evaluated(target)
    reference_factors = _factors(gold)
    if reference_factors is not None:
        # A factorisation is answered by a factorisation, not by the expanded polynomial.
        return _same_factors(target, reference_factors)
    # timeout_seconds=None: the SIGALRM-based timeout breaks outside a main thread; the
    # process-level kill in grade_many is the real limit.
    return bool(verify(gold, target, timeout_seconds=None))


def _evaluated(expression: Any) -> Any:
    """Closed form of a finite sum (sum_(i=1)^n i^3 -> (n(n+1)/2)^2)."""
    doit = getattr(expression, "doit", None)
    if doit is not None and type(expression).__name__ == "Sum":
        try:
            return doit()
        except Exception:
            return expression
    return expression


def _same_value(left: str, right: str) -> str | None:
    """NORMALIZED_MATCH or EQUIVALENT when the two values are equal, else None."""
    if normalize_answer(left).lower() == normalize_answer(right).lower():
        return NORMALIZED_MATCH
    if _RELATION.search(to_latex(left)) or _RELATION.search(to_latex(right)):
        return None
    return EQUIVALENT if _symbolic_equal(left, right) else None


def _names(solutions: list[Solution]) -> list[str | None]:
    seen: list[str | None] = []
    for solution in solutions:
        for name, _ in solution:
            if name not in seen:
                seen.append(name)
    return seen


def _same_solutions(answer: list[Solution], reference: list[Solution]) -> str | None:
    if not answer or not reference:
        return None
    reference_names = _names(reference)
    answer_names = _names(answer)
    named = len([n for n in reference_names if n is not None]) > 1
    if named and len(reference) == 1 and answer_names == [None] and len(answer) == len(reference[0]):
        # "6, 5" for "x=6, y=5": the values in the reference's order.
        answer = [tuple((name, value[0][1]) for (name, _), value in zip(reference[0], answer, strict=True))]
    elif not named or len([n for n in answer_names if n is not None]) <= 1:
        answer = [tuple((None, value) for _, value in solution) for solution in answer]
        reference = [tuple((None, value) for _, value in solution) for solution in reference]
    if len(answer) != len(reference):
        return None
    reasons: list[str] = []
    unmatched = list(reference)
    for solution in answer:
        for candidate in unmatched:
            reason = _same_solution(solution, candidate)
            if reason is not None:
                unmatched.remove(candidate)
                reasons.append(reason)
                break
        else:
            return None
    return NORMALIZED_MATCH if all(r == NORMALIZED_MATCH for r in reasons) else EQUIVALENT


def _same_solution(answer: Solution, reference: Solution) -> str | None:
    if len(answer) != len(reference):
        return None
    if all(name is not None for name, _ in reference) and all(name is not None for name, _ in answer):
        given = dict(answer)
        expected = dict(reference)
        if set(given) != set(expected):
            return None
        pairs = [(given[name], expected[name]) for name in expected]
    else:
        pairs = [(a, r) for (_, a), (_, r) in zip(answer, reference, strict=True)]
    reasons = [_same_value(a, r) for a, r in pairs]
    if any(reason is None for reason in reasons):
        return None
    return NORMALIZED_MATCH if all(r == NORMALIZED_MATCH for r in reasons) else EQUIVALENT


# ------------------------------------------------------------------------- text forms

_STOP_WORDS = frozenset(
    {"the", "a", "an", "is", "are", "be", "of", "with", "and", "to", "it", "its", "that", "this", "in", "on", "as",
     "by", "which", "there", "if", "for", "has", "have", "at"}
)  # fmt: skip
_OPTIONAL_WORDS = frozenset(
    {"function", "sequence", "series", "limit", "value", "values", "number", "numbers", "solution", "solutions",
     "polynomial", "expression", "answer", "result", "relationship", "equation", "given", "monotonically",
     "strictly"}
)  # fmt: skip


def _words(text: str) -> set[str]:
    prose = re.sub(r"\x00\d+\x00", " ", protect(text).text)
    words = re.findall(r"[a-z]{2,}", prose.lower())
    return {word.rstrip("s") if len(word) > 3 else word for word in words}


def _formulas(text: str) -> list[str]:
    protected = protect(plain_unicode(text))
    tokens = protected.text.split()
    found: list[str] = []
    index = 0
    while index < len(tokens):
        run = math_run(tokens, index)
        if run is None:
            index += 1
            continue
        found.append(protected.restore(run.text, delimiters=False))
        index = run.end_token
    return found


def _squashed(formula: str) -> str:
    return re.sub(r"\s+|\\left|\\right|\{|\}", "", to_latex(formula)).replace("\\geq", "\\ge").replace("\\leq", "\\le")


def _same_text(answer: str, reference: str) -> bool:
    reference_polarity = claims.polarity(reference)
    answer_polarity = claims.polarity(answer)
    if (reference_polarity is claims.Polarity.NO) != (answer_polarity is claims.Polarity.NO):
        return False
    wanted = _words(reference) - _STOP_WORDS - {w.rstrip("s") for w in _OPTIONAL_WORDS} - _OPTIONAL_WORDS
    if not wanted <= _words(answer):
        return False
    answer_formulas = [_squashed(f) for f in _formulas(answer)]
    for formula in _formulas(reference):
        squashed = _squashed(formula)
        if re.fullmatch(r"-?\d+", squashed):
            if not any(re.fullmatch(rf"(?:.*[^\d])?{re.escape(squashed)}", f) for f in answer_formulas):
                return False
        elif not any(squashed in f for f in answer_formulas):
            return False
    return True


# ------------------------------------------------------------------------------ verdict


_CONDITION = re.compile(r"\s+(?:for (?:all|any|every|each)|whenever|when)\b.*$", re.IGNORECASE | re.DOTALL)
_TRAILING_UNIT = re.compile(r"\s*\\(?:text|mbox|mathrm|textrm)\s*\{\s*[a-zA-Z][a-zA-Z .]*\}\s*\.?$")


def _value_of(answer: str) -> str | None:
    """The formula an answer gives: itself, or the one formula a sentence holds."""
    answer = _TRAILING_UNIT.sub("", answer) or answer  # "\\frac{5}{2} \\text{ meters}"
    if not claims.is_statement(answer) and not claims.has_prose(answer):
        return answer
    if claims.polarity(answer) is claims.Polarity.NO or claims.hedges(answer):
        return None
    # The formulas of a condition ("... for any integer n") are not the answer.
    unconditional = _CONDITION.sub("", answer)
    formulas = _formulas(unconditional)
    if len(formulas) != 1 or _COMPARED.search(protect(plain_unicode(unconditional)).text):
        return None  # "A is greater than 1/15" does not answer 1/15
    return answer_of_formula(formulas[0])


# A formula right after a comparison: what is compared with, not the answer.
_COMPARED = re.compile(rf"(?:{claims.COMPARISON.pattern})\s*(?:\x00\d+\x00|[-(]?\d)", re.IGNORECASE)


def _fits(given: claims.Bound | None, wanted: claims.Bound) -> bool:
    """A claimed bound answers a count: an unbounded or exact count answers any bound
    of the same number ("exactly one" answers "at least 1"); a bound answers only the
    same bound ("at most two" does not answer "exactly one")."""
    return given is None or given is wanted or given is claims.Bound.EXACTLY


def _claimed_count(answer: str, form: Form) -> claims.Count | None:
    """The count an answer in words claims, when the reference is a count; else None."""
    if form.bound is None or not claims.has_prose(answer):
        return None
    return claims.count(answer)


def _matches(form: Form, answer: str) -> str | None:
    kind = form.kind
    if kind is Kind.VALUE:
        stated = _claimed_count(answer, form)
        if stated is not None and form.bound is not None:
            same = _fits(stated.bound, form.bound) and _same_value(stated.number, form.text) is not None
            return SAME_MEANING if same else None
        value = _value_of(answer)
        if value is None:
            return None
        return _same_solutions(solutions_of(value), solutions_of(form.text))
    if kind is Kind.TEXT:
        return SAME_MEANING if _same_text(answer, form.text) else None
    if kind is Kind.YES:
        if claims.polarity(answer) is not claims.Polarity.YES:
            return None
        if form.text:
            wanted = [s for f in _formulas(form.text) for s in solutions_of(f)]
            given = [s for f in _formulas(answer) for s in solutions_of(f)]
            for solution in wanted:
                if not any(_same_solution(g, solution) for g in given):
                    return None
        return SAME_MEANING
    if kind is Kind.NO:
        return SAME_MEANING if claims.polarity(answer) is claims.Polarity.NO else None
    if kind is Kind.NONE:
        leading_no = re.match(r"^\W*no\b", answer, re.IGNORECASE) is not None and not claims.hedges(answer)
        return SAME_MEANING if claims.says_none(answer) or leading_no else None
    if kind is Kind.ALL:
        return SAME_MEANING if claims.says_all(answer) else None
    return SAME_MEANING if claims.says_infinitely_many(answer) else None


def reference_answer(reference: str) -> str:
    """A reference given as a whole solution ("... \\boxed{7}") is read for its answer."""
    if "\\boxed" in reference or "\\fbox" in reference or re.search(r"^#+\s*Answer", reference, re.MULTILINE):
        return extract_final_answer(reference) or reference
    return reference


def grade_in_process(given: str, reference: str) -> GradeResult:
    """Grade without any timeout protection; call it only where a hang is acceptable or
    inside a killable worker (``grade_many`` does that)."""
    answer = extract_final_answer(given)
    if answer is None:
        return GradeResult(False, NO_ANSWER)
    expected = reference_answer(reference)
    if normalize_answer(answer).lower() == normalize_answer(expected).lower():
        return GradeResult(True, NORMALIZED_MATCH)
    for form in read_reference(expected):
        reason = _matches(form, answer)
        if reason is not None:
            return GradeResult(True, reason)
    return GradeResult(False, DIFFERENT)
