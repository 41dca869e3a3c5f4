"""Where a labeler stands in a phase-2 solution, computed from their ratings.

Pure functions on plain data, shared by the rating service (which validates a
request against it and keeps the stored trajectory consistent) and by the task
screen selector (which shows the same state). No ORM here.

Rules (PRM800K phase 2): steps are rated in order; labeling stops at the first
step whose own text (completion 0) is rated -1, where the labeler also rates
the alternative completions, if any; or after the last step is rated 0 or +1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from labeling.models import FinishReason


@dataclass(frozen=True)
class Progress:
    # Index of the step where labeling currently stops: the first unrated step,
    # or the first step rated -1. Equals the step count when every step is
    # rated 0 or +1.
    stop_index: int
    # True when the step at stop_index is rated -1 (the first error).
    stopped_at_error: bool
    # Alternative ordinals at the error step still waiting for a rating.
    alternatives_pending: tuple[int, ...]
    step_count: int

    @property
    def ready_reason(self) -> FinishReason | None:
        """The finish reason the labeler may submit now, or None while work remains."""
        if self.stopped_at_error:
            return None if self.alternatives_pending else FinishReason.FOUND_ERROR
        if self.stop_index >= self.step_count:
            return FinishReason.SOLUTION
        return None

    @property
    def current_key(self) -> str:
        """DOM id of the completion the keyboard acts on first (``c-<step>-<completion>``), or of the submit button.

        The first alternative still unrated at the error step, else the first
        unrated step; "finish" when nothing is left to rate.
        """
        if self.stopped_at_error:
            return f"c-{self.stop_index}-{self.alternatives_pending[0]}" if self.alternatives_pending else "finish"
        return f"c-{self.stop_index}-0" if self.stop_index < self.step_count else "finish"

    def can_rate_step(self, index: int) -> bool:
        """Completion 0 of ``index`` may be (re)rated: every earlier step is rated 0 or +1."""
        return 0 <= index <= min(self.stop_index, self.step_count - 1)


def progress_compute(
    *,
    step_count: int,
    own_ratings: Mapping[int, int | None],
    alternative_ratings: Mapping[int, int | None],
) -> Progress:
    """``own_ratings``: step index -> rating of completion 0 (None: row exists, unrated).

    ``alternative_ratings``: ordinal -> rating of the alternatives stored at the
    error step (only meaningful when the walk stops at an error).
    """
    index = 0
    while index < step_count:
        rating = own_ratings.get(index)
        if rating is None:
            break
        if rating == -1:
            pending = tuple(sorted(o for o, r in alternative_ratings.items() if r is None))
            return Progress(
                stop_index=index, stopped_at_error=True, alternatives_pending=pending, step_count=step_count
            )
        index += 1
    return Progress(stop_index=index, stopped_at_error=False, alternatives_pending=(), step_count=step_count)


def chosen_completions(*, labeled_indexes: Sequence[int]) -> dict[int, int | None]:
    """chosen_completion for each labeled step: 0 where the solution continued past it, null at the last.

    "Null at the step where labeling stopped" (prm800k-format.md) holds for every
    finish reason: at a found error, after the final step, and where the
    labeler gave up.
    """
    if not labeled_indexes:
        return {}
    last = max(labeled_indexes)
    return {i: (None if i == last else 0) for i in labeled_indexes}
