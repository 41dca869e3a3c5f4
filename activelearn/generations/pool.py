"""The pool a generation scores: solutions with steps never served, frozen into chunks once."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef

from activelearn.generations.config import GenerationConfig
from activelearn.models import GenerationRun, ScoreChunk, SolutionSample
from labeling.models import Solution, Task

# Ids per query when reading the pool back (SQLite allows 32,766 bound parameters).
ID_PAGE = 5000


def pool_solution_ids(*, config: GenerationConfig, run_id: int | None = None) -> list[int]:
    """The generation's pool: scorable solutions never served as a task, capped per problem;
    with ``sample_n``, only those the run's draws became."""
    queryset = Solution.objects.with_steps().exclude(Exists(Task.objects.filter(solution_id=OuterRef("pk"))))
    if config.sample_n:
        queryset = queryset.filter(Exists(SolutionSample.objects.filter(run_id=run_id, solution_id=OuterRef("pk"))))
    if config.problem_ids is not None:
        queryset = queryset.filter(problem__unique_id__in=config.problem_ids)
    if config.split is not None:
        queryset = queryset.filter(problem__split=config.split)
    ids: list[int] = []
    taken: dict[int, int] = {}
    for solution_id, problem_id in queryset.order_by("problem_id", "id").values_list("id", "problem_id").iterator():
        count = taken.get(problem_id, 0)
        if config.per_problem_cap is None or count < config.per_problem_cap:
            ids.append(solution_id)
            taken[problem_id] = count + 1
    return sorted(ids)


def score_chunks_create(*, run: GenerationRun) -> int:
    """Freeze the pool into chunks, once per run; returns how many chunks the run has."""
    with transaction.atomic():
        # Serialises concurrent dispatchers: only the first one finds no chunks.
        GenerationRun.objects.select_for_update().filter(pk=run.pk).first()
        existing = ScoreChunk.objects.filter(run=run).count()
        if existing:
            return existing
        ids = pool_solution_ids(config=GenerationConfig.from_json(run.config), run_id=run.pk)
        size = settings.PIPELINE_SCORE_CHUNK_SIZE
        chunks = [
            ScoreChunk(run=run, first_id=part[0], last_id=part[-1], solution_ids=part)
            for part in (ids[start : start + size] for start in range(0, len(ids), size))
        ]
        ScoreChunk.objects.bulk_create(chunks)
        GenerationRun.objects.filter(pk=run.pk).update(score_total=len(ids), scored=0)
        return len(chunks)


def run_pool_ids(*, run: GenerationRun) -> list[int]:
    """The pool frozen by the scoring step (all chunks' solutions), in id order."""
    ids: list[int] = []
    for part in ScoreChunk.objects.filter(run=run).order_by("first_id").values_list("solution_ids", flat=True):
        ids.extend(int(i) for i in part)
    return ids


def id_pages(ids: Sequence[int], size: int = ID_PAGE) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]
