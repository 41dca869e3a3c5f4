"""Which answers to one problem are the same answer, by the grader's own comparison.

Majority and weighted vote count answers, so "1/3" and "\\frac{1}{3}" must be one answer,
not two. The grader already decides when two answers are equal; grouping reuses it:

* every candidate graded correct is equal to the reference, so all of them are one group
  (with any candidate whose normalised answer is one of theirs);
* the wrong answers are grouped among themselves: two normalised strings are one answer
  when ``grade_in_process`` accepts each one with the other as the reference (both
  directions, so that a reference reading of a model's sentence, "X, or Y", cannot pull
  a different answer in); groups are the connected components of that relation.

Only distinct normalised strings are compared, each pair once (memoised across the
problems of a call, since the comparison does not depend on the problem), in a
``GradingPool`` whose workers are killed past ``timeout_s`` per comparison; a comparison
that times out or fails counts as "different". Pure Python, no Django.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from activelearn.grading.comparison import (
    DEFAULT_TIMEOUT_S,
    DIFFERENT,
    EQUIVALENT,
    NORMALIZED_MATCH,
    SAME_MEANING,
    Grader,
    grade_in_process,
)
from activelearn.grading.normalization import normalize_answer
from activelearn.grading.workers import GradingPool

# Per comparison, wall clock, as for grading (the worker is killed past it). The slowest
# of 2,895 comparisons among the wrong answers of 48 CHAMP problems took 1.5 CPU-s (a
# 1959th power of a polynomial against numbers); the median well under 1 ms.
COMPARISON_TIMEOUT_S = DEFAULT_TIMEOUT_S
_VERDICTS = frozenset({NORMALIZED_MATCH, EQUIVALENT, SAME_MEANING, DIFFERENT})


@dataclass(frozen=True)
class GroupingStats:
    problems: int
    candidates: int
    distinct_wrong_answers: int  # distinct normalised wrong answers, summed over problems
    comparisons: int  # grader calls made (both directions, after memoisation)
    undecided: int  # comparisons that timed out or failed: counted as different
    seconds: float


def answer_key(answer: str) -> str:
    """The string under which the grader itself calls two answers equal without more work
    (its normalised-match rule)."""
    return normalize_answer(answer).lower()


class _UnionFind:
    def __init__(self, size: int) -> None:
        self.parent = list(range(size))

    def find(self, item: int) -> int:
        while self.parent[item] != item:
            self.parent[item] = self.parent[self.parent[item]]
            item = self.parent[item]
        return item

    def union(self, left: int, right: int) -> None:
        roots = sorted((self.find(left), self.find(right)))
        self.parent[roots[1]] = roots[0]  # the lower index (the more frequent string) stays the root


def answer_groups(
    problems: Sequence[Sequence[tuple[str, bool]]],
    *,
    timeout_s: float = COMPARISON_TIMEOUT_S,
    processes: int = 1,
    grader: Grader = grade_in_process,
) -> tuple[list[list[str]], GroupingStats]:
    """A group key for every candidate of every problem (``(answer, graded correct)``
    pairs, in order); candidates of one problem with equal keys give the same answer.

    The key is the group's most frequent normalised answer (first seen on a tie), so it
    reads as the answer it stands for. ``grader`` must be a picklable top-level function
    (it runs in spawned workers); the default is the product's comparison.
    """
    started = time.perf_counter()
    layouts: list[tuple[list[str], list[str], str | None]] = []
    wanted: set[tuple[str, str]] = set()
    distinct_wrong = 0
    for candidates in problems:
        keys = [answer_key(answer) for answer, _ in candidates]
        right_keys = Counter(key for key, (_, correct) in zip(keys, candidates, strict=True) if correct)
        correct_key = right_keys.most_common(1)[0][0] if right_keys else None
        # Most frequent first, so a group's root (and key) is its most common string.
        wrong = [key for key, _ in Counter(k for k in keys if k not in right_keys).most_common()]
        raw = _first_spelling(keys, candidates)
        distinct_wrong += len(wrong)
        for later in range(1, len(wrong)):
            for earlier in range(later):
                wanted.add(_ordered(raw[wrong[later]], raw[wrong[earlier]]))
        layouts.append((keys, wrong, correct_key))

    verdicts: dict[tuple[str, str], bool] = {}
    undecided = 0
    with GradingPool(processes=processes, timeout_s=timeout_s, grader=grader) as pool:
        # One direction for every pair, the other only where the first said equal.
        for batch in (sorted(wanted), None):
            if batch is None:
                batch = sorted({(b, a) for (a, b), same in verdicts.items() if same} - verdicts.keys())
            results = pool.grade(batch)
            for pair, result in zip(batch, results, strict=True):
                verdicts[pair] = result.correct
                undecided += result.reason not in _VERDICTS
    groups: list[list[str]] = []
    for candidates, (keys, wrong, correct_key) in zip(problems, layouts, strict=True):
        raw = _first_spelling(keys, candidates)
        found = _UnionFind(len(wrong))
        for later in range(1, len(wrong)):
            for earlier in range(later):
                forward = _ordered(raw[wrong[later]], raw[wrong[earlier]])
                if verdicts.get(forward) and verdicts.get((forward[1], forward[0])):
                    found.union(later, earlier)
        position = {key: index for index, key in enumerate(wrong)}
        # A key that is not a wrong answer's was graded correct (or is one's spelling).
        groups.append([wrong[found.find(position[key])] if key in position else str(correct_key) for key in keys])
    stats = GroupingStats(
        problems=len(problems),
        candidates=sum(len(c) for c in problems),
        distinct_wrong_answers=distinct_wrong,
        comparisons=len(verdicts),
        undecided=undecided,
        seconds=time.perf_counter() - started,
    )
    return groups, stats


def _first_spelling(keys: Sequence[str], candidates: Sequence[tuple[str, bool]]) -> dict[str, str]:
    """Each normalised key's first answer as written: what the grader is shown."""
    spelling: dict[str, str] = {}
    for key, (answer, _) in zip(keys, candidates, strict=True):
        spelling.setdefault(key, answer)
    return spelling


def _ordered(left: str, right: str) -> tuple[str, str]:
    # Equal means equal both ways, so one order per pair: a pair met again in another
    # problem, either way round, is not compared again.
    return (left, right) if left <= right else (right, left)
