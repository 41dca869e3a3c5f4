"""Which unlabeled solutions to send to labelers next: pure functions on plain records.

``select_convincing`` is the PRM800K "convincing wrong-answer" rule: the PRM's score
(under the checkpoint's chosen aggregation), and whether the PRM flags any step below its
first-error threshold, say how convincing a solution looks, the automatic grade says whether its final answer is
wrong. A high-scoring wrong-answer solution is known to fool the current PRM somewhere,
so labeling it is the most informative use of a label. ``wrong_share`` of the picks are
the most convincing wrong-answer solutions; the rest are the most convincing of the
remaining ones (right or wrong), so the data is not all wrong-answer.

Nothing here touches Django or torch; the campaign simulator and the Django pipeline call
the same functions.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Bucket = Literal["wrong_answer", "other", "uniform"]


@dataclass(frozen=True)
class PoolCandidate:
    problem_id: Hashable
    solution_id: Hashable
    score: float  # PRM solution score: how convincing the solution looks
    is_correct: bool | None  # graded final answer; None (ungraded) never counts as wrong
    # The PRM finds no step below its first-error threshold (None: unknown). A passing
    # solution is more convincing than any it flags, whatever the aggregated scores.
    passes: bool | None = None


@dataclass(frozen=True)
class Selected:
    problem_id: Hashable
    solution_id: Hashable
    priority: float  # the convincingness score; higher is labeled first
    is_correct: bool | None
    bucket: Bucket
    passes: bool | None = None


def _order(candidates: Iterable[PoolCandidate], rng: random.Random) -> list[PoolCandidate]:
    """Solutions the PRM passes first, then highest score first; ties broken by a seeded
    shuffle, not by input order or id."""
    keyed = [(candidate, rng.random()) for candidate in candidates]
    keyed.sort(key=lambda pair: (pair[0].passes is not True, -pair[0].score, pair[1]))
    return [candidate for candidate, _ in keyed]


def _mix(ordered: Sequence[PoolCandidate], k: int, wrong_count: int) -> list[tuple[PoolCandidate, Bucket]]:
    """The top ``wrong_count`` wrong-answer candidates, then the best of the rest up to ``k``.

    When there are fewer wrong-answer candidates than ``wrong_count`` the shortfall is
    filled from the rest, so the budget is always spent when the pool allows.
    """
    picked: list[tuple[PoolCandidate, Bucket]] = []
    taken: set[int] = set()
    for position, candidate in enumerate(ordered):
        if len(picked) >= min(wrong_count, k):
            break
        if candidate.is_correct is False:
            picked.append((candidate, "wrong_answer"))
            taken.add(position)
    for position, candidate in enumerate(ordered):
        if len(picked) >= k:
            break
        if position not in taken:
            picked.append((candidate, "other"))
    return picked


def select_convincing(
    candidates: Iterable[PoolCandidate],
    k_per_problem: int | None = None,
    k_total: int | None = None,
    wrong_share: float = 0.8,
    exclude: Collection[Hashable] = frozenset(),
    seed: int = 0,
) -> list[Selected]:
    """Convincing wrong-answer selection, per problem (``k_per_problem``), global
    (``k_total``) or both (at most ``k_per_problem`` per problem, ``k_total`` in all).

    Solutions whose id is in ``exclude`` (already labeled or queued) are never picked.
    Per problem, the number of wrong-answer slots is spread over problems so that the
    overall share is ``wrong_share`` to within one pick (K=1 per problem still yields an
    80/20 mix across problems). The result is sorted by priority, highest first.
    """
    if k_per_problem is None and k_total is None:
        raise ValueError("give k_per_problem, k_total or both")
    if not 0.0 <= wrong_share <= 1.0:
        raise ValueError("wrong_share must be within [0, 1]")
    rng = random.Random(f"select-convincing:{seed}")
    pool = [candidate for candidate in candidates if candidate.solution_id not in exclude]
    picks: list[tuple[PoolCandidate, Bucket]]
    if k_per_problem is not None:
        by_problem: dict[Hashable, list[PoolCandidate]] = {}
        for candidate in pool:
            by_problem.setdefault(candidate.problem_id, []).append(candidate)
        problems = list(by_problem)
        rng.shuffle(problems)  # which problems get the rounded-up wrong slot is seeded
        picks = []
        for index, problem_id in enumerate(problems):
            # Cumulative rounding: problem i gets round(target up to i) - round(target before i).
            wrong_count = round((index + 1) * k_per_problem * wrong_share) - round(index * k_per_problem * wrong_share)
            picks.extend(_mix(_order(by_problem[problem_id], rng), k_per_problem, wrong_count))
        if k_total is not None and len(picks) > k_total:
            # Re-apply the mix globally to the per-problem shortlist.
            shortlist = _order((candidate for candidate, _ in picks), rng)
            picks = _mix(shortlist, k_total, round(k_total * wrong_share))
    else:
        assert k_total is not None
        picks = _mix(_order(pool, rng), k_total, round(k_total * wrong_share))
    selected = [
        Selected(
            candidate.problem_id, candidate.solution_id, candidate.score, candidate.is_correct, bucket, candidate.passes
        )
        for candidate, bucket in picks
    ]
    selected.sort(key=lambda item: -item.priority)
    return selected


def select_uniform(
    candidates: Iterable[PoolCandidate],
    k_total: int,
    exclude: Collection[Hashable] = frozenset(),
    seed: int = 0,
) -> list[Selected]:
    """Uniformly random solutions (the PRM800K phase-1 / baseline rule)."""
    pool = [candidate for candidate in candidates if candidate.solution_id not in exclude]
    rng = random.Random(f"select-uniform:{seed}")
    chosen = rng.sample(pool, min(k_total, len(pool)))
    return [Selected(c.problem_id, c.solution_id, c.score, c.is_correct, "uniform") for c in chosen]


def serving_order(selected: Sequence[Selected]) -> list[Selected]:
    """``selected`` in the order to label them: every prefix holds the selection's share of
    wrong answers (to within half a pick), each group most convincing first.

    Sorting the whole selection by score would serve the convincing correct answers first:
    a correct solution the PRM likes outscores a wrong one it likes, so with 80% wrong
    picks the first tasks labeled were mostly correct ones, and a generation labeled only
    in part (labelers stop, the next generation starts) trained on the wrong mix. Serving
    wrong answers first would skew it the other way. Interleaving keeps the intended mix
    at every point of the queue, and still labels the most convincing of each kind first.
    """
    wrong = sorted((s for s in selected if s.is_correct is False), key=lambda s: -s.priority)
    other = sorted((s for s in selected if s.is_correct is not False), key=lambda s: -s.priority)
    total = len(wrong) + len(other)
    order: list[Selected] = []
    taken_wrong = taken_other = 0
    for position in range(1, total + 1):
        # Wrong answers due among the first ``position``: position times the share, rounded half up.
        due = (2 * position * len(wrong) + total) // (2 * total)
        if taken_other == len(other) or (taken_wrong < len(wrong) and taken_wrong < due):
            order.append(wrong[taken_wrong])
            taken_wrong += 1
        else:
            order.append(other[taken_other])
            taken_other += 1
    return order
