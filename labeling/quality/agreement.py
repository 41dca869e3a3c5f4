"""Agreement arithmetic: a labeler's ratings against gold, and labelers against each other.

Plain Python (plus ``krippendorff``/numpy), no ORM: ``labeling.quality.control`` loads
rows and calls these. The definitions are in docs/quality.md; this module is
the only implementation of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import krippendorff
import numpy as np

RATINGS = (-1, 0, 1)
# A step without a GoldStep row: any non-negative rating, never an error.
DEFAULT_ACCEPTABLE: frozenset[int] = frozenset({0, 1})
# Finish reasons whose trajectory can be judged; give_up and bad_problem cannot,
# and count as disagreeing (otherwise giving up on hard items would dodge QC).
JUDGEABLE_FINISHES = frozenset({"found_error", "solution"})


@dataclass(frozen=True)
class Gold:
    """Acceptable ratings per step of one gold solution (index -> subset of {-1, 0, 1})."""

    acceptable: Mapping[int, frozenset[int]]
    step_count: int

    def allows(self, step_index: int, rating: int) -> bool:
        return rating in self.acceptable.get(step_index, DEFAULT_ACCEPTABLE)

    @property
    def error_steps(self) -> frozenset[int]:
        """Steps that are acceptable first errors."""
        return frozenset(i for i in range(self.step_count) if self.allows(i, -1))

    @property
    def has_error(self) -> bool:
        """Whether some step must be found: no trajectory through all steps is acceptable."""
        return not all(self.allows(i, 0) or self.allows(i, 1) for i in range(self.step_count))


def first_negative(ratings: Mapping[int, int | None]) -> int | None:
    """The labeler's first error: the lowest step whose own rating is -1."""
    return min((i for i, r in ratings.items() if r == -1), default=None)


def solution_agrees(*, gold: Gold, ratings: Mapping[int, int | None], finish_reason: str | None) -> bool:
    """Whether one labeled trajectory agrees with gold (the primary figure).

    Agrees when the first negative step is an acceptable error step and every
    step before it may be passed (rated 0 or +1); or, with no negative step,
    when the labeler rated every step and gold allows passing all of them.
    """
    if finish_reason not in JUDGEABLE_FINISHES:
        return False
    first = first_negative(ratings)
    if first is None:
        rated_all = all(ratings.get(i) is not None for i in range(gold.step_count))
        return rated_all and not gold.has_error
    passable_before = all(gold.allows(i, 0) or gold.allows(i, 1) for i in range(first))
    return passable_before and gold.allows(first, -1)


def steps_agreeing(*, gold: Gold, ratings: Mapping[int, int | None]) -> tuple[int, int]:
    """(agreeing, rated): rated own steps whose rating gold accepts (the secondary figure)."""
    rated = [(i, r) for i, r in ratings.items() if r is not None and i < gold.step_count]
    return sum(1 for i, r in rated if gold.allows(i, r)), len(rated)


def share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


# --- Inter-annotator agreement ----------------------------------------------


def ordinal_alpha(units: Sequence[Mapping[str, int]]) -> float | None:
    """Krippendorff's alpha (ordinal, values -1/0/+1) over units rated by coders.

    ``units`` holds one mapping coder -> rating per unit (one unit = one step
    of one task). Units rated by fewer than two coders carry no information
    and are dropped. None when alpha is undefined (no pairable unit, or every
    rating identical so there is no expected disagreement).
    """
    pairable = [u for u in units if len(u) >= 2]
    if not pairable:
        return None
    coders = sorted({c for u in pairable for c in u})
    index = {c: n for n, c in enumerate(coders)}
    data = np.full((len(coders), len(pairable)), np.nan)
    for column, unit in enumerate(pairable):
        for coder, rating in unit.items():
            data[index[coder], column] = rating
    values = {r for u in pairable for r in u.values()}
    if len(values) < 2:
        return None
    alpha = float(krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal", value_domain=list(RATINGS)))
    return None if math.isnan(alpha) else alpha
