"""The final answer of a model-written solution.

Sources, in order; the first that yields an answer wins:

1. the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces honoured; a cut-off box is
   skipped);
2. a PRM800K ``# Answer`` trailer (the next non-blank line);
3. the last explicit statement of it: "the (final) answer is ...", "Answer: ...";
4. the concluding sentence: among the last three sentences (after dropping closing
   remarks such as "This is the final answer." or "Note: ..."), the last that opens
   with a conclusion word (therefore, thus, so, hence, in conclusion, finally, ...),
   else the last sentence;
5. the same for a separate summary turn, when the caller has one (CHAMP asks each
   model to "summarize the answer above in one sentence").

A statement is then reduced to its answer: the formula after the last "is" / "are" /
"equals" ("the smallest value of f(x) is 2" -> ``2``), the count after "there are"
("there are 239 such strings" -> ``239``), the right-hand side of an equation chain
("a_6 + b_6 + c_6 = 70 + 99 + 70 = 239" -> ``239``). A statement without such a formula
is kept whole, minus its connective ("Therefore, 1964 is not a prime number." ->
``1964 is not a prime number``): yes/no, "impossible" and other text answers are
compared by meaning in ``comparison``.

None means no answer was found: no box, no answer phrase, and the concluding
sentence states nothing (no formula, no yes/no, no negation). Such a solution is
"no answer found", which is not the same as a wrong answer.
"""

from __future__ import annotations

import re

from mathtext import claims
from mathtext.notation import (
    NUMBER_WORDS,
    PLACEHOLDER,
    UNIT_TAIL,
    Protected,
    math_run,
    plain_unicode,
    protect,
    split_top_level,
)

# ---------------------------------------------------------------------------- markers


def _last_braced_argument(text: str, command: str) -> str | None:
    """Content of the last ``command{...}`` (nested braces honoured) or ``command x``."""
    for match in reversed(list(re.finditer(re.escape(command) + r"(?![a-zA-Z])\s*", text))):
        index = match.end()
        if index < len(text) and text[index] == "{":
            depth = 0
            for end in range(index, len(text)):
                depth += {"{": 1, "}": -1}.get(text[end], 0)
                if depth == 0:
                    return text[index + 1 : end]
            continue  # unbalanced: this answer is cut off, try an earlier one
        bare = re.match(r"[^\s$]+", text[index:])
        if bare:
            return bare.group(0)
    return None


def _boxed(text: str) -> str | None:
    for command in ("\\boxed", "\\fbox"):
        boxed = _last_braced_argument(text, command)
        if boxed is not None and boxed.strip():
            return boxed.strip()
    return None


_ANSWER_TRAILER = re.compile(r"^#+\s*Answer\s*:?[ \t]*(?P<inline>\S.*)?$", re.IGNORECASE | re.MULTILINE)


def _answer_trailer(text: str) -> str | None:
    trailers = list(_ANSWER_TRAILER.finditer(text))
    if not trailers:
        return None
    last = trailers[-1]
    if last.group("inline"):
        return last.group("inline").strip()
    tail = text[last.end() :].strip()
    return tail.splitlines()[0].strip() if tail else None


# "The final answer is 7", "the answer is no, ...", "Answer: 7", "Final Answer: The only ...".
# Not "This is the final answer." (nothing follows) nor "the answer is the same as before".
_ANSWER_PHRASE = re.compile(
    r"(?:\b(?:the\s+)?(?:final\s+)?answer\s+(?:to\s+(?:the|this)\s+(?:problem|question)\s+)?is\b\s*:?"
    r"|\b(?:final\s+)?answer\s*:)"
    r"\s*(?:that\b\s*)?",
    re.IGNORECASE,
)


def _answer_phrase(protected: Protected) -> str | None:
    text = protected.text
    matches = list(_ANSWER_PHRASE.finditer(text))
    for match in reversed(matches):
        rest = text[match.end() :]
        statement = _first_statement(rest)
        if statement:
            answer = _reduce(statement, protected)
            if answer:
                return answer
    return None


def _first_statement(text: str) -> str:
    """The sentence that starts ``text``; a formula on the following line belongs to it."""
    lines = [_clean_line(line)[0] for line in text.split("\n")]
    head = lines[0] if lines else ""
    if not head.strip(" :") and len(lines) > 1:
        following = next((line for line in lines[1:] if line), "")
        head = following
    return _sentences(head)[0] if _sentences(head) else ""


# -------------------------------------------------------------------------- sentences

_LIST_MARK = re.compile(r"^(?:[-*\u2022]\s+|\d{1,2}[.)]\s+|\(\d{1,2}\)\s+|[a-z][.)]\s+(?=\S)|#+\s*)")
# A sentence ends at ". " or "? " before a capital, a formula or a digit; "..." and
# factorials ("n! / ...") are not sentence ends.
_SENTENCE_END = re.compile(r"(?<!\.\.)(?<=[.?])\s+(?=[A-Z\x00\d(])")
_OPEN_END = re.compile(r"(?:\b(?:is|are|be|by|as|equals|to|get|obtain|have|gives?)|[=:,+\-*/])\s*$", re.IGNORECASE)
_FORMULA_LINE = re.compile(r"^[\s\x00\d.,;:=+\-*/^()]*$")
# Conditions on list items ("f(x) = 1 for all x != 0") are dropped when the items are the answer.
_ITEM_CONDITION = re.compile(r"\s+(?:for (?:all|every|any|each)|when|where|if)\b.*$", re.IGNORECASE)


def _clean_line(line: str) -> tuple[str, bool]:
    line = line.replace("**", "").replace("__", " ").strip()
    stripped = _LIST_MARK.sub("", line).strip()
    return stripped, stripped != line


def _sentences(text: str) -> list[str]:
    parts = [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]
    # A lone list number left by the split ("... as follows. 2. Next") is not a sentence.
    return [part for part in parts if len(parts) == 1 or not re.fullmatch(r"\(?\d{1,2}[.)]", part)]


def _statements(protected: Protected) -> list[str]:
    """Sentences of the text in order. A line that only holds a formula joins the
    sentence it completes ("... the sum is:" followed by a display), and list items
    after a colon join it as a comma-separated list."""
    merged: list[str] = []
    listing = False
    for raw in protected.text.split("\n"):
        line, is_item = _clean_line(raw)
        if not line:
            continue
        only_formula = bool(_FORMULA_LINE.match(line)) and PLACEHOLDER.search(line) is not None
        if merged and listing and is_item:
            merged[-1] = f"{merged[-1]}, {_ITEM_CONDITION.sub('', line).rstrip('.;, ')}"
            continue
        listing = False
        if merged and merged[-1].endswith(":") and is_item:
            merged[-1] = f"{merged[-1]} {_ITEM_CONDITION.sub('', line).rstrip('.;, ')}"
            listing = True
        elif merged and (only_formula or _OPEN_END.search(merged[-1])) and not merged[-1].endswith("."):
            merged[-1] = f"{merged[-1]} {line}"
        else:
            merged.append(line)
    return [sentence for line in merged for sentence in _sentences(line)]


# Closing remarks that state nothing themselves ("This is the final answer.", "Note: ...",
# "These are the three-digit automorphic numbers where ...", "This formula can be used to
# ..."): they point back at the answer a step before them states.
_FILLER = re.compile(
    r"^(?:"
    r"(?:this|that|it|which) is (?:the|our) (?:final |complete )?(?:answer|result|solution)\b(?!\s*(?:is|:))"
    r"|it (?:is|are) (?:the|all the|our) (?:only |desired |required |final )?"
    r"(?:expression|formula|closed[- ]form|number|only|answer|result|values?|solutions?|polynomials?|functions?|"
    r"possible|desired|required|way|ways|constant)\b"
    r"|(?:please )?note\b|i hope\b|hope this helps|let me know|feel free\b|keep in mind\b|remember\b"
    r"|(?:this|which) (?:completes|concludes|proves|finishes|confirms|verifies)\b"
    r"|(?:this|these) (?:examples?|steps?) (?:demonstrates?|shows?|illustrates?)\b"
    r"|q\.?e\.?d\.?|\u220e|$"
    r")",
    re.IGNORECASE,
)
# A pointer back at what came before: "These are the three-digit automorphic numbers
# where ...", "This formula can be used to ...", "This is because ...". Unlike the remarks above it may go on to
# conclude ("This is the only case, so no such polyhedron exists").
_POINTER = re.compile(
    r"^(?:(?:this|these|that|those) (?:is|are) (?:the|all the|our)\b"
    r"|(?:this|these|that|those|the above) (?:[\w-]+ ){0,3}?(?:expression|formula|equation|result|answer|values?|"
    r"identity|numbers?|sums?|recurrence|relation|method|approach|solutions?|reasoning|argument|pattern)s? "
    r"(?:represents?|gives?|accounts?|can|could|will|would|should|may|might|holds?|applies|works?|counts?|"
    r"describes?|provides?|(?:is|are) (?:valid|correct|true|the|our|an?|all))\b"
    r"|(?:this|that) is (?:because|since|due to)\b)",
    re.IGNORECASE,
)
_FORMULA_IN_HEAD = re.compile(r"\d|\x00|=")
# "..., so the formula remains the same": a remark about the answer already stated.
_UNCHANGED = re.compile(
    r"^(?:the|this|that|our|its) (?:final |original |above |same )?(?:formula|answer|result|expression|value|sum|"
    r"count|conclusion|solution|equation|identity)s? (?:(?:remains?|stays?|is|are) (?:the same|unchanged|valid|"
    r"correct|true)|still holds?|(?:does not|doesn't) change|is (?:not affected|unaffected))\W*$",
    re.IGNORECASE,
)
_CONCLUSION = re.compile(
    r"^(?:and\s+|now\s+|but\s+)?(?:therefore|thus|hence|so|consequently|in conclusion|to conclude|in summary|"
    r"however|nevertheless|but|actually|"
    r"to summari[sz]e|in short|finally|as a result|overall|in total|in all|all in all|altogether|"
    r"we (?:can |may )?conclude|this (?:means|shows|implies)|it follows|by induction|the answer|the final answer|"
    r"the result)\b",
    re.IGNORECASE,
)
# "..., so the minimum is 5": a conclusion in mid-sentence; what follows it is the statement.
_MID_CONCLUSION = re.compile(
    r"(?:[,;]\s*|\s+)(?:and\s+)?(?:so\b(?!\s+(?:that|on|far)\b)|therefore\b|thus\b|hence\b|consequently\b)[\s,]*"
    r"|,\s*(?:we (?:can |may )?(?:conclude|see|know|find|get|have|deduce|obtain)|it follows)\b"
    r"(?:\s+that\b)?[\s,]*",
    re.IGNORECASE,
)
_CONCLUSION_WINDOW = 3


# What is left of a display cut off or closed on a line of its own: "$$", "\\]".
_DELIMITERS_ONLY = re.compile(r"^(?:\$\$?|\\[\[\]()]|\\(?:begin|end)\{\w+\*?\}|\s)*$")


def _is_filler(statement: str) -> bool:
    if _DELIMITERS_ONLY.match(statement):
        return True
    if _display(statement) is not None:
        return False  # "This is the closed-form formula for the sum: <display>" states it
    head = " ".join(statement.split()[:8])
    if not _FORMULA_IN_HEAD.search(head):
        if _FILLER.match(statement):
            return True
        if _POINTER.match(statement):
            middles = list(_MID_CONCLUSION.finditer(statement))
            return not middles or _is_filler(statement[middles[-1].end() :])
    return bool(_UNCHANGED.match(_main_clause(statement)))


_GIVEN_VALUE = re.compile(r"(?<![\w)\]])[a-zA-Z](?:_\w+)?\s*=\s*-?[\d(]")


def _display(statement: str) -> str | None:
    """The formula a statement ends in after a colon ("... is the zero polynomial: f(x) = 0"), or None."""
    if ":" not in statement:
        return None
    head, tail = (part.strip() for part in statement.rsplit(":", 1))
    if _NAMED_FORMULA.search(head) or _DENIAL.search(head):
        return None  # "there are no integer solutions to the equation: ...": the claim is in the words
    run = math_run(tail.split(), 0) if tail else None
    return tail if run is not None and run.reaches_end else None


def _concluding_statement(protected: Protected) -> tuple[str, bool] | None:
    """The sentence that concludes the text, and whether it is marked as a conclusion."""
    statements = _statements(protected)
    remarks: list[str] = []
    while statements and _is_filler(statements[-1]):
        remarks.append(statements.pop())
    if not statements:
        return None
    if len(statements) == 1:
        return statements[0], True  # a bare answer or a one-sentence summary
    # A remark that gives a value itself ("This verifies that ... for k = -3") does not
    # point at the display.
    pointing = remarks and not any(_GIVEN_VALUE.search(remark) for remark in remarks)
    display = _display(statements[-1]) if pointing else None
    if display is not None:
        # "... is the zero polynomial:\nf(x) = 0\nThis is the polynomial that ...": the
        # closing remark points at the formula displayed just before it.
        return display, True
    window = statements[-_CONCLUSION_WINDOW:]
    for statement in reversed(window):
        if _CONCLUSION.match(statement):
            return statement, True
        if claims.hedges(statement):
            continue  # "Given that ..., it is possible that ...": a guess, not a conclusion
        if _MID_CONCLUSION.search(statement):
            return statement, True
        if _CAUSE.match(statement) and _CLAUSE_START.search(statement):
            return statement, True  # "Since ..., the sequence is increasing."
    return window[-1], False


# ------------------------------------------------------------------------- reduction

_CONNECTIVE = re.compile(
    r"^(?:(?:and|now|but|then|also|finally|overall|therefore|thus|hence|so|consequently|in conclusion|however|"
    r"nevertheless|actually|"
    r"to conclude|in summary|to summari[sz]e|in short|as a result|by induction|in other words|in fact|indeed|"
    r"in total|in all|all in all|altogether|"
    r"clearly|accordingly|regardless|in this case|in all cases|in either case)\b[\s,:]*"
    r"|(?:we (?:can |may )?(?:conclude|see|find|get|have|obtain|know|say|deduce|determine)|it follows|"
    r"this (?:means|shows|implies|proves|gives us|gives)|(?:this|which) (?:tells|leaves) us)(?: that)?\b[\s,:]*)+",
    re.IGNORECASE,
)
# A leading reason concludes: "Since the sum is not an integer, it's impossible ..."; a
# leading condition ("If n is even, ...") does not.
_CAUSE = re.compile(r"^(?:since|because|as|given that)\b", re.IGNORECASE)
# A leading subordinate clause: "Since the sum is not an integer, it's impossible ...".
_SUBORDINATE = re.compile(r"^(?:since|because|as|given|if|when|regardless|although|while|after|using)\b", re.IGNORECASE)
_CLAUSE_START = re.compile(
    r",\s*(?=(?:it|we|the|there|this|these|that|a|an|so|then|therefore|thus|hence|our|all|no|each|every|x|n|"
    r"[A-Z]|\x00)\b)"
)
# Reasons and side remarks after the answer: "is 2, and it occurs when x = 0", "because ...";
# not a denial of what precedes it ("all the labels are equal, which is not possible").
_DENIED = r"(?!\s+(?:not possible|impossible|not true|false|absurd)\b)"
_JUSTIFICATION = re.compile(
    r"(?:,\s*|\s+)(?:because|since|as (?:can be|we|it|shown|required|desired|expected)|which (?:is"
    + _DENIED
    + r"|means|occurs|happens|gives|can|was|we|implies)|where\b|when\b|achieved\b|attained\b|occurring\b|"
    r"and (?:this|it|that) (?:occurs|happens|is (?:achieved|attained|obtained))|(?:and |, )?(?:this|which) (?:is"
    + _DENIED
    + r"|value|minimum|maximum))"
    r"|,\s*(?:by (?:the|using|applying)\b|due to\b|given that\b|so that\b|obtained\b|for (?:example|instance)\b|"
    r"meaning\b|i\.e\.|that is\b)",
    re.IGNORECASE,
)
_COPULA = re.compile(
    r"\b(?:is equal to|are equal to|is given by|are given by|is simply|are simply|simplifies to|reduces to|"
    r"comes out to|amounts to|is|are|was|were|equals|will be|would be|must be|should be|becomes|remains|can be)\b",
    re.IGNORECASE,
)
# "X has 2,001,000 terms": a count after a verb of having, only when nothing but units follow.
_POSSESSIVE = re.compile(r"(?<!\bwe )\b(?:has|have|had|contains?|yields?|gives?)\b", re.IGNORECASE)
_EXISTENTIAL = re.compile(
    r"\bthere (?:is|are|exist|exists|will be|would be)\s+(?:exactly |only |precisely |a total of |in total )?",
    re.IGNORECASE,
)
_LEAD_WORDS = frozenset(
    {"simply", "just", "always", "exactly", "precisely", "then", "also", "indeed", "therefore", "thus", "still",
     "equal", "to", "given", "by", "the", "expression", "formula", "value", "number", "answer", "result", "only",
     "final", "answer:", "total", "of", ":", "equivalent", "congruent", "then,", "precisely:"}
)  # fmt: skip
_ARTICLES = frozenset({"a", "an"})
_NEGATION = re.compile(
    r"\b(?:no|not|none|never|cannot|can't|impossible|neither|nor|isn't|aren't|doesn't|don't|didn't|won't|"
    r"wouldn't|couldn't|shouldn't|nothing|nowhere|false)\b",
    re.IGNORECASE,
)
# Denials that are the statement's point, which no formula in it can answer for.
_DENIAL = re.compile(
    r"\bthere (?:is|are|exist|exists|will be|would be|can be|could be)\s+(?:no|not)\b|\bno (?:\S+ ){0,5}(?:exists?|"
    r"satisf\w*|works?)\b|\b(?:impossible|cannot|can't|not possible)\b|^(?:yes|no)\b",
    re.IGNORECASE,
)
_NEGATED_VERB = re.compile(
    r"^\s*(?:not|never|no\b)|^\s*(?:always|also)?\s*(?:not|never)\b",
    re.IGNORECASE,
)
_STATES_SOMETHING = re.compile(r"\d|\x00|[=<>^]|\b(?:" + "|".join(NUMBER_WORDS) + r")\b", re.IGNORECASE)
_YES_NO = re.compile(r"^(?:yes|no)\b", re.IGNORECASE)


def _states_something(statement: str) -> bool:
    return bool(_STATES_SOMETHING.search(statement) or _NEGATION.search(statement) or _YES_NO.match(statement))


def _strip_connectives(statement: str) -> str:
    statement = _LIST_MARK.sub("", statement.strip().lstrip(",:; ")).strip()
    previous = None
    while previous != statement:
        previous = statement
        statement = _CONNECTIVE.sub("", statement, count=1).strip().lstrip(",: ").strip()
    return statement


# A condition after a formula that states the answer ("... \\equiv 0 \\pmod{120} for any integer n").
QUALIFIER = re.compile(r"^(?:for (?:all|any|every|each)|whenever|when|if)\b", re.IGNORECASE)
# "for all 1000 values of x_n, we have x_n > 4/5": the quantifier is the answer.
_UNIVERSAL = re.compile(r"^for (?:all|every|each|any)\b", re.IGNORECASE)


def _main_clause(statement: str) -> str:
    """The part of a sentence that states its conclusion."""
    statement = _strip_connectives(statement.strip())
    if not _YES_NO.match(statement) and not _UNIVERSAL.match(statement):
        middles = list(_MID_CONCLUSION.finditer(statement))
        if middles and middles[-1].end() < len(statement):
            statement = statement[middles[-1].end() :]
        elif _SUBORDINATE.match(statement):
            start = _CLAUSE_START.search(statement)
            if start:
                statement = statement[start.end() :]
    clause = _strip_connectives(statement)
    # "the relationship between A and B is that A < B for all n": the part after "is that".
    that = re.search(r"\b(?:is|are) that\b\s*", clause, re.IGNORECASE)
    if that and that.end() < len(clause):
        clause = clause[that.end() :]
    return clause


# The main verb after a parenthetical: "The value of X, which is divisible by 7, is 0".
_RESUMED_PREDICATE = re.compile(r",\s*(?:is|are|was|were|equals|must be|will be|would be)\b", re.IGNORECASE)


def _cut_justification(statement: str) -> str:
    """The statement without its reasons and side remarks; a parenthetical remark
    set off by commas is taken out and the sentence carries on after it."""
    while (match := _JUSTIFICATION.search(statement)) is not None and match.start() > 0:
        resumed = _RESUMED_PREDICATE.search(statement, match.end())
        if statement[match.start()] == "," and resumed is not None:
            statement = statement[: match.start()] + " " + statement[resumed.start() + 1 :].lstrip()
            continue
        return statement[: match.start()].rstrip(" ,;")
    return statement


def _value_after(tokens: list[str], start: int, *, must_reach_end: bool) -> str | None:
    """The formula after a copula, skipping lead words ("is given by the expression ...")."""
    index = start
    while index < len(tokens):
        word = tokens[index].lower().rstrip(",:")
        if word in _LEAD_WORDS or (word in _ARTICLES and index + 1 < len(tokens) and tokens[index + 1] != "="):
            index += 1
            continue
        break
    rest = " ".join(tokens[index:])
    if claims.COMPARISON.match(rest):
        # "is greater than 1/15", "must be divisible by 5": a comparison, not a value; a
        # bounded count that ends the statement is one ("is at most two" -> "at most 2").
        bounded = claims.BOUNDED_COUNT.match(rest)
        # Not after "have" (``must_reach_end``): "For no n does P(x) have at least one root".
        if bounded and not must_reach_end and UNIT_TAIL.match(rest[bounded.end() :].strip()):
            count = claims.bounded_count(rest)
            return f"{count.bound} {count.number}" if count and count.bound else None
        return None
    word = tokens[index].lower().rstrip(".,;:") if index < len(tokens) else ""
    if word in NUMBER_WORDS:
        rest = " ".join(tokens[index + 1 :])
        return str(NUMBER_WORDS[word]) if not must_reach_end or UNIT_TAIL.match(rest) else None
    run = math_run(tokens, index)
    if run is None:
        # A formula after a few prose words counts only if it ends the statement:
        # "is given by the binomial coefficient C(n, 4)" but not "is the sum of the first n terms".
        for ahead in range(index + 1, min(index + 5, len(tokens))):
            run = math_run(tokens, ahead)
            if run is not None:
                return run.text if run.end_token == len(tokens) else None
        return None
    if must_reach_end and not run.reaches_end:
        return None
    following = tokens[run.end_token].lower() if run.end_token < len(tokens) else ""
    if following in ("and", "or"):
        return None  # "are 0 and any positive integer below 100": the formula is only part of it
    return run.text


# An equation named as an object is not one the statement asserts.
_NAMED_FORMULA = re.compile(r"\b(?:equations?|identity|condition|inequality|recurrence|relation)\s*$", re.IGNORECASE)


def _formula_of(clause: str, protected: Protected) -> str | None:
    """The formula a clause states as its answer, or None for a statement in words."""
    if _DENIAL.search(clause):
        return None
    tokens = clause.split()
    existential = _EXISTENTIAL.search(clause)
    if existential:
        value = _value_after(tokens, len(clause[: existential.end()].split()), must_reach_end=False)
        if value is not None:
            return value
    # An equation chain that ends the clause: "is T(6) = 76", "... = 216 + 24 = 240 ways",
    # "\\( n^5 - 5n^3 + 4n \\equiv 0 \\pmod{120} \\) for any integer n".
    for start in range(len(tokens)):
        run = math_run(tokens, start)
        if run is None:
            continue
        equation = bool(_top_level_equals(protected.restore(run.text, delimiters=False)))
        qualified = equation and bool(QUALIFIER.match(" ".join(tokens[run.end_token :])))
        if run.reaches_end or qualified:
            if equation and _NAMED_FORMULA.search(" ".join(tokens[:start])):
                break  # "... must be divisible by 5 in any solution to the equation x^2 + y^2 = z^2"
            if equation or start == 0:
                return _from_first_equation(run.text, protected) if equation else run.text
            break
    for copula in reversed(list(_COPULA.finditer(clause))):
        if _NEGATED_VERB.match(clause[copula.end() :]):
            return None  # "1964 is not a prime number": an answer in words
        value = _value_after(tokens, len(clause[: copula.end()].split()), must_reach_end=False)
        if value is not None:
            return value
        break
    for verb in reversed(list(_POSSESSIVE.finditer(clause))):
        value = _value_after(tokens, len(clause[: verb.end()].split()), must_reach_end=True)
        if value is not None:
            return value
    return None


def _from_first_equation(formula: str, protected: Protected) -> str:
    """'1982, and n mod 1982 = 0' -> 'n mod 1982 = 0': list items before the first
    equation belong to the prose ("divisible by 1982, and ...")."""
    items = split_top_level(re.sub(r"\s+(?:and|or)\s+", ", ", formula), ",")
    for index, item in enumerate(items):
        if _top_level_equals(protected.restore(item, delimiters=False)):
            return ", ".join(part.strip() for part in items[index:])
    return formula


def _last_rhs(formula: str) -> str:
    """The right-hand side of an equation chain; a list of assignments is kept whole."""
    items = [item.strip() for item in split_top_level(formula.replace(" and ", ",").replace(" or ", ","), ",")]
    items = [item for item in items if item and item != "\\quad"]
    if len(items) > 1:
        return formula
    parts = _top_level_equals(formula)
    if not parts:
        return formula
    return parts[-1].strip()


def _top_level_equals(formula: str) -> list[str]:
    """``formula`` split at '=' / '\\equiv' outside brackets; [] when there is none."""
    unified = re.sub(r"\\equiv|\\approx|(?<![<>!\\])=(?!=)", "\x01", formula)
    parts = split_top_level(unified, "\x01")
    return parts if len(parts) > 1 else []


_MODULUS = re.compile(
    r"\s*(?:\\pmod\s*\{[^{}]*\}|\\pmod\s*\w+|\(\s*(?:\\bmod|\\mod|mod)\s*[^()]*\)|(?:\\bmod|\\mod|mod)\s*\w+)\s*$"
)
_SUBJECT_NAMES = re.compile(r"\b(?:of|for)\s+((?:[a-zA-Z]\s*,\s*)*[a-zA-Z](?:\s*,)?\s+and\s+[a-zA-Z])\s*$")


def _tidy_value(value: str) -> str:
    value = " ".join(value.split()).strip().rstrip(".,;:").strip()
    return _MODULUS.sub("", value).strip() or value


def _named(clause: str, value: str) -> str:
    """'the values of a and b are 3 and -4' -> 'a = 3, b = -4'."""
    copula = list(_COPULA.finditer(clause))
    if not copula:
        return value
    names = _SUBJECT_NAMES.search(clause[: copula[-1].start()].strip())
    if not names:
        return value
    variables = [v for v in re.split(r"\s*,\s*|\s+and\s+", names.group(1)) if v]
    values = [v.strip() for v in re.split(r"\s*,\s*|\s+and\s+", value) if v.strip()]
    if len(variables) != len(values) or any("=" in v for v in values):
        return value
    return ", ".join(f"{name} = {v}" for name, v in zip(variables, values, strict=True))


def answer_of_formula(formula: str) -> str:
    """The answer a formula states: the last right-hand side of an equation chain, without
    a modulus ("n^5 - 5n^3 + 4n \\equiv 0 \\pmod{120}" -> "0"); lists are kept."""
    return _tidy_value(_last_rhs(formula))


def _reduce(statement: str, protected: Protected, *, concluded: bool = True) -> str | None:
    """A statement reduced to its answer; None if it states nothing.

    ``concluded``: the statement was marked as a conclusion ("Therefore, ...", "the
    answer is ..."), so a plain statement in words counts as the answer.
    """
    full = _main_clause(statement)
    clause = _cut_justification(full)
    if not clause:
        return None
    formula = _formula_of(clause, protected)
    # "can have at most one zero, which is 0": the bounded count is the claim, not the 0.
    if formula is None and clause != full and not _DENIAL.search(clause) and not claims.count_bound_in(clause):
        formula = _formula_of(full, protected)
    if formula is not None:
        value = answer_of_formula(protected.restore(formula, delimiters=False))
        if value:
            return _named(protected.restore(clause, delimiters=False), value)
    if not concluded and not _states_something(clause):
        return None
    return protected.restore(clause.rstrip(" .;:"), delimiters=True)


# ------------------------------------------------------------------------------ public


_SETTLE_ROUNDS = 3


def extract_final_answer(solution_text: str, *, summary: str | None = None) -> str | None:
    """The final answer of a solution (or of a bare answer, which comes back as itself).

    ``summary`` is a separate statement of the answer, such as the reply to a
    "summarize your answer" turn; it is read only when the solution itself states
    no answer. None: no answer found.

    The result is settled: extracting again from it gives it back. Stored answers are
    extracted again when graded, so an answer that read once more says less ("**") or
    something shorter must not be stored in its first form.
    """
    for text in (solution_text, summary):
        if not text or not text.strip():
            continue
        answer = _extract(text)
        for _ in range(_SETTLE_ROUNDS):
            if answer is None:
                break
            again = _extract(answer)
            if again == answer:
                return answer
            answer = again
        # Nothing, or text that keeps shrinking when read again (a degenerate reply).
    return None


def _extract(text: str) -> str | None:
    text = plain_unicode(text.replace("\r\n", "\n").replace("\r", "\n"))
    boxed = _boxed(text)
    if boxed:
        return answer_of_formula(boxed)
    trailer = _answer_trailer(text)
    if trailer:
        return trailer  # a PRM800K answer, as written
    protected = protect(text)
    phrased = _answer_phrase(protected)
    if phrased:
        return phrased
    concluding = _concluding_statement(protected)
    if concluding:
        statement, concluded = concluding
        return _reduce(statement, protected, concluded=concluded)
    return None
