"""Final-answer extraction and grading for MATH-style problems.

Grading is two-stage: a cheap string normalisation (commas, ``\\!``, ``\\dfrac``, units,
degrees, percentages, ``x =`` prefixes...) that settles most pairs, then symbolic
equivalence with ``math_verify``. Symbolic checks can hang inside sympy, and
``math_verify``'s own SIGALRM timeout only works in a main thread, so ``grade_many`` runs
each item in a spawned worker process and kills the worker when an item overruns.

This module must not import Django or torch: Celery workers and the spawned grading
processes import it on their own.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnProcess
from typing import Any

DEFAULT_TIMEOUT_S = 5.0
_WORKER_START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class GradeResult:
    correct: bool
    # "normalized-match", "equivalent", "different", "unparsable", "timeout", "error: ..."
    reason: str


Grader = Callable[[str, str], GradeResult]


# ---------------------------------------------------------------------------- extraction


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


_ANSWER_TRAILER = re.compile(r"^#+\s*Answer\s*:?\s*$", re.IGNORECASE | re.MULTILINE)
_ANSWER_PHRASE = re.compile(r"^(?:so\s+)?(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)\s*", re.IGNORECASE)


def extract_final_answer(solution_text: str) -> str | None:
    """The final answer of a solution: last ``\\boxed{}``, else a ``# Answer`` trailer, else
    the last non-empty line (minus an "The answer is" lead-in). None for empty text."""
    for command in ("\\boxed", "\\fbox"):
        boxed = _last_braced_argument(solution_text, command)
        if boxed is not None:
            return boxed.strip()
    trailers = list(_ANSWER_TRAILER.finditer(solution_text))
    if trailers:
        tail = solution_text[trailers[-1].end() :].strip()
        if tail:
            return tail.splitlines()[0].strip()
    lines = [line.strip() for line in solution_text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    return _ANSWER_PHRASE.sub("", lines[-1]).strip()


# ------------------------------------------------------------------------- normalisation

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


# ------------------------------------------------------------------------------ grading


def grade_in_process(given: str, reference: str) -> GradeResult:
    """Grade without any timeout protection; call it only where a hang is acceptable or
    inside a killable worker (``grade_many`` does that)."""
    given_answer = _answer_of(given)
    reference_answer = _answer_of(reference)
    if given_answer is None or reference_answer is None:
        return GradeResult(False, "unparsable")
    if _normalized_equal(given_answer, reference_answer):
        return GradeResult(True, "normalized-match")
    left, right = normalize_answer(given_answer), normalize_answer(reference_answer)
    # Imported here so the Django process (which only needs the fast path above) never
    # pays for importing sympy.
    from math_verify import parse, verify

    # The timeouts are disabled on purpose (see below); its warning about that is noise.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gold = parse(f"${right}$", parsing_timeout=None)
    target = parse(f"${left}$", parsing_timeout=None)
    if not gold or not target:
        return GradeResult(False, "unparsable")
    # timeout_seconds=None: the SIGALRM-based timeout breaks outside a main thread; the
    # process-level kill in grade_many is the real limit.
    if verify(gold, target, timeout_seconds=None):
        return GradeResult(True, "equivalent")
    return GradeResult(False, "different")


def _normalized_equal(given_answer: str, reference_answer: str) -> bool:
    # Case-insensitive so text answers ("Monday" / "monday") match; symbolic answers
    # where case matters never get here as false positives in MATH-style data.
    return normalize_answer(given_answer).lower() == normalize_answer(reference_answer).lower()


def _answer_of(text: str) -> str | None:
    return extract_final_answer(text)


def grade_answer(given: str, reference: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when ``given`` matches ``reference``. Either may be a bare answer or a whole
    solution (its final answer is extracted). Symbolic checks run in a worker process."""
    given_answer, reference_answer = _answer_of(given), _answer_of(reference)
    if given_answer is None or reference_answer is None:
        return False
    if _normalized_equal(given_answer, reference_answer):
        return True
    return grade_many([(given, reference)], timeout_s=timeout_s, processes=1)[0].correct


def _worker_loop(connection: Connection, grader: Grader) -> None:
    # Warm up before announcing readiness so import time never eats into an item's budget.
    grader("1", "1")
    from math_verify import parse

    parse("$1$", parsing_timeout=None)
    connection.send(("ready", None))
    while True:
        task = connection.recv()
        if task is None:
            return
        index, given, reference = task
        try:
            result = grader(given, reference)
        except Exception as error:
            result = GradeResult(False, f"error: {type(error).__name__}: {error}")
        connection.send((index, result))


@dataclass
class _Worker:
    process: SpawnProcess
    connection: Connection
    ready: bool = False
    task: int | None = None
    deadline: float = 0.0
    started: float = 0.0


def grade_many(
    pairs: Sequence[tuple[str, str]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    processes: int | None = None,
    *,
    grader: Grader = grade_in_process,
) -> list[GradeResult]:
    """Grade ``(given, reference)`` pairs in parallel worker processes, in input order.

    An item that runs past ``timeout_s`` gets its worker killed and is graded incorrect
    with reason "timeout"; the rest of the batch carries on in a fresh worker. ``grader``
    must be a picklable top-level function (workers are spawned, not forked: forking a
    process that holds threads, e.g. torch's, can deadlock).
    """
    if not pairs:
        return []
    results: list[GradeResult | None] = [None] * len(pairs)
    pending: deque[int] = deque(range(len(pairs)))
    count = max(1, min(processes or min(4, os.cpu_count() or 1), len(pairs)))
    context = multiprocessing.get_context("spawn")

    def start() -> _Worker:
        parent, child = context.Pipe()
        process = context.Process(target=_worker_loop, args=(child, grader), daemon=True)
        process.start()
        child.close()
        return _Worker(process=process, connection=parent, started=time.monotonic())

    def retire(worker: _Worker) -> None:
        worker.process.kill()
        worker.process.join(timeout=5)
        worker.connection.close()

    workers = [start() for _ in range(count)]
    try:
        while pending or any(w.task is not None for w in workers):
            for worker in workers:
                if worker.ready and worker.task is None and pending:
                    index = pending.popleft()
                    worker.connection.send((index, pairs[index][0], pairs[index][1]))
                    worker.task, worker.deadline = index, time.monotonic() + timeout_s
            now = time.monotonic()
            deadlines = [w.deadline if w.ready else w.started + _WORKER_START_TIMEOUT_S for w in workers]
            ready = wait([w.connection for w in workers], timeout=max(0.0, min(deadlines) - now))
            for position, worker in enumerate(workers):
                replacement: _Worker | None = None
                if worker.connection in ready:
                    try:
                        message: Any = worker.connection.recv()
                    except (EOFError, OSError):
                        if not worker.ready:
                            raise RuntimeError("grading worker died while starting") from None
                        _fail(results, worker.task, "error: worker died")
                        replacement = start()
                    else:
                        if message[0] == "ready":
                            worker.ready = True
                        else:
                            results[message[0]] = message[1]
                            worker.task = None
                elif worker.ready and worker.task is not None and time.monotonic() >= worker.deadline:
                    _fail(results, worker.task, "timeout")
                    replacement = start()
                elif not worker.ready and time.monotonic() >= worker.started + _WORKER_START_TIMEOUT_S:
                    raise RuntimeError("grading worker did not start")
                if replacement is not None:
                    retire(worker)
                    workers[position] = replacement
    finally:
        for worker in workers:
            if worker.process.is_alive() and worker.ready and worker.task is None:
                with contextlib.suppress(OSError):
                    worker.connection.send(None)
                worker.process.join(timeout=2)
            retire(worker)
    return [result if result is not None else GradeResult(False, "error: not graded") for result in results]


def _fail(results: list[GradeResult | None], index: int | None, reason: str) -> None:
    if index is not None:
        results[index] = GradeResult(False, reason)
