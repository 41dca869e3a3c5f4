"""Service: score stored solutions with a trained checkpoint, upserting ``SolutionScore``.

Work is addressed by what it is (``scoring_pool``: problems of a split, given problems,
a generation's tasks, only what the checkpoint has not scored) or by solution id range,
so the generation pipeline can fan a pool out over several GPU workers. Re-scoring (a
redelivered chunk, a second run) updates rows in place thanks to the
``solution_score_once_per_checkpoint`` unique constraint, so chunks are idempotent. The
model is loaded once per process (``checkpoint_model_load``), however many pages a run has.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from activelearn.models import CheckpointStatus, PRMCheckpoint, SolutionScore
from activelearn.selection.solutions import solutions_matching
from labeling.models import Solution, SolutionQuerySet

if TYPE_CHECKING:
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    from activelearn.prm.modeling import ProcessRewardModel

Reduction = Literal["product", "min", "mean", "last"]
NeutralAs = Literal["positive", "negative"]

# Solutions read, scored and written per round trip: bounded memory, few large INSERTs.
CHUNK = 512

_cache_lock = threading.Lock()
# One model per process at a time: a GPU worker serves one checkpoint per generation,
# and keeping older ones would only hold GPU memory.
_cached: dict[str, tuple[ProcessRewardModel, PreTrainedTokenizerBase]] = {}


class CheckpointNotReadyError(ValueError):
    """Scoring or evaluating needs a READY checkpoint with a saved model."""


def feature_cache_configure() -> None:
    """Point the PRM package at ``settings.PRM_FEATURE_CACHE_DIR`` (once per process)."""
    from activelearn.prm import feature_cache

    directory = settings.PRM_FEATURE_CACHE_DIR
    current = feature_cache.configured()
    if (current.directory if current is not None else None) != directory:
        feature_cache.configure(directory)


def checkpoint_model_load(*, checkpoint: PRMCheckpoint) -> tuple[ProcessRewardModel, PreTrainedTokenizerBase]:
    """The checkpoint's model on the best device, loaded once per process."""
    if checkpoint.status != CheckpointStatus.READY or not checkpoint.path:
        raise CheckpointNotReadyError(f"checkpoint {checkpoint.pk} is {checkpoint.status}, not ready")
    key = str(Path(checkpoint.path).resolve())
    feature_cache_configure()
    with _cache_lock:
        if key not in _cached:
            import torch

            from activelearn.prm.modeling import ProcessRewardModel

            if not Path(key).is_dir():
                raise CheckpointNotReadyError(f"checkpoint {checkpoint.pk}: model directory {key} is missing")
            cuda = torch.cuda.is_available()
            model, tokenizer = ProcessRewardModel.from_pretrained(key, dtype=torch.bfloat16 if cuda else None)
            model.to("cuda" if cuda else "cpu").eval()
            _cached.clear()
            _cached[key] = (model, tokenizer)
        return _cached[key]


def scoring_pool(
    *,
    checkpoint: PRMCheckpoint,
    splits: Sequence[str] | None = None,
    problem_ids: Sequence[str] | None = None,
    generation: int | None = None,
    unscored: bool = False,
) -> SolutionQuerySet:
    """Solutions with steps, narrowed by problem split, problem id, generation (served as
    its tasks; ``selection.solutions.solutions_matching``) and, with ``unscored``, to those
    ``checkpoint`` has not scored yet."""
    queryset = solutions_matching(
        splits=splits or (), problem_ids=problem_ids or (), generations=() if generation is None else (generation,)
    )
    if unscored:
        queryset = queryset.exclude(
            Exists(SolutionScore.objects.filter(checkpoint=checkpoint, solution_id=OuterRef("pk")))
        )
    return queryset


def solutions_score(
    *,
    checkpoint: PRMCheckpoint,
    solution_ids: Iterable[int],
    batch_size: int = 16,
    reduction: Reduction = "product",
    neutral_as: NeutralAs = "positive",
) -> int:
    """Score the given solutions (ones without steps are skipped); returns rows written."""
    ids = sorted(set(solution_ids))
    written = 0
    for start in range(0, len(ids), CHUNK):
        queryset = Solution.objects.filter(id__in=ids[start : start + CHUNK])
        written += _score_rows(checkpoint, _solution_rows(queryset), batch_size, reduction, neutral_as)
    return written


def solutions_score_range(
    *,
    checkpoint: PRMCheckpoint,
    first_id: int,
    last_id: int,
    batch_size: int = 16,
    reduction: Reduction = "product",
    neutral_as: NeutralAs = "positive",
) -> int:
    """Score every solution with ``first_id <= id <= last_id`` (inclusive), in keyset pages."""
    written = 0
    cursor = first_id - 1
    while True:
        page = list(
            Solution.objects.with_steps()
            .filter(id__gt=cursor, id__lte=last_id)
            .order_by("id")
            .values_list("id", "problem__problem", "steps")[:CHUNK]
        )
        if not page:
            return written
        cursor = page[-1][0]
        written += _score_rows(checkpoint, _with_steps(page), batch_size, reduction, neutral_as)


def _solution_rows(queryset: SolutionQuerySet) -> Iterator[tuple[int, str, list[str]]]:
    return _with_steps(queryset.with_steps().values_list("id", "problem__problem", "steps"))


def _with_steps(rows: Iterable[tuple[int, str, Any]]) -> Iterator[tuple[int, str, list[str]]]:
    # Phase-1 placeholders (steps null) and empty solutions have nothing to score.
    for solution_id, problem, steps in rows:
        if steps:
            yield solution_id, problem, [str(step) for step in steps]


def _score_rows(
    checkpoint: PRMCheckpoint,
    rows: Iterable[tuple[int, str, list[str]]],
    batch_size: int,
    reduction: Reduction,
    neutral_as: NeutralAs,
) -> int:
    from activelearn.prm.scoring import score_solutions

    items = list(rows)
    if not items:
        return 0
    model, tokenizer = checkpoint_model_load(checkpoint=checkpoint)
    scores = score_solutions(
        model,
        tokenizer,
        [(problem, list(steps)) for _, problem, steps in items],
        batch_size=batch_size,
        reduction=reduction,
        neutral_as=neutral_as,
    )
    now = timezone.now()
    objects = [
        SolutionScore(
            solution_id=solution_id,
            checkpoint=checkpoint,
            # P(pos) + P(neu) can round a hair past 1 in float32; the row holds a probability.
            score=_clamp(result.score),
            step_scores=[_clamp(s) for s in result.step_scores],
            reduction=reduction,
            scored_at=now,
        )
        for (solution_id, _, _), result in zip(items, scores, strict=True)
    ]
    SolutionScore.objects.bulk_create(
        objects,
        update_conflicts=True,
        unique_fields=["solution", "checkpoint"],
        update_fields=["score", "step_scores", "reduction", "scored_at"],
    )
    return len(objects)


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, float(value)))
