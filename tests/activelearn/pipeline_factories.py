"""Builders for the generation pipeline tests: an imported pool, labels to train on, and
helpers to read what the pipeline enqueued and to drive its steps in-process."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from activelearn.generations import sampling, steps
from activelearn.models import SampleChunkStatus, ScoreChunkStatus
from annotate import celery
from labeling.models import Generation, GenerationStatus, Problem, Solution, content_sha256, text_sha256

from .label_factories import FILLER, TINY_CONFIG, keyword_labels

# Small and fast: a couple of optimizer steps of a random tiny model.
TINY_TRAINING = {**TINY_CONFIG, "max_steps": 2, "val_fraction": 0.0}


def labels(count: int = 6, *, seed: int = 3) -> None:
    """Submitted phase-1 labels, so training has data (and no generation number is taken)."""
    keyword_labels(count, seed=seed, generation_number=None)


def pool(*, problems: int = 4, per_problem: int = 6, seed: int = 1, wrong_rate: float = 0.6) -> list[Solution]:
    """Problems with reference answer 42 and unlabeled solutions ending in \\boxed{42} or a wrong answer."""
    rng = random.Random(seed)
    made = []
    for p in range(problems):
        text = f"Pool problem {seed}-{p}: compute the value."
        problem = Problem.objects.create(
            unique_id=f"pool/{seed}/{p}.json", problem=text, problem_sha256=text_sha256(text), answer="42"
        )
        for s in range(per_problem):
            wrong = rng.random() < wrong_rate
            steps = [" ".join([*rng.sample(FILLER, 4), rng.choice(["correct", "wrong"])]) for _ in range(3)]
            steps.append(f"so the answer is \\boxed{{{41 - s if wrong else 42}}}")
            made.append(
                Solution.objects.create(
                    problem=problem, steps=steps, content_sha256=content_sha256(steps, None), source_model=f"gen-{s}"
                )
            )
    return made


def config(**overrides: Any) -> dict[str, Any]:
    return {"base_model": "tiny:bert", "training": TINY_TRAINING, "k": 8, **overrides}


def queued(callbacks: Sequence[Callable[[], Any]]) -> list[tuple[str, tuple[int, ...], str]]:
    """(task name, args, queue) of the sends the pipeline registered with on_commit."""
    sends = [cb for cb in callbacks if isinstance(cb, partial) and cb.func is celery._send]
    return [(cb.args[0].rsplit(".", 1)[1], cb.args[1], cb.args[3]["queue"]) for cb in sends]


def drive(generation: Generation, *, limit: int = 20) -> Generation:
    """Run the generation's steps in this process until it opens or fails."""
    for _ in range(limit):
        generation.refresh_from_db()
        status = generation.status
        if status == GenerationStatus.SAMPLING:
            sampling.sampling_dispatch(generation_id=generation.pk)
            for sample_chunk in generation.run.sample_chunks.exclude(status=SampleChunkStatus.DONE):
                sampling.sample_chunk_run(chunk_id=sample_chunk.pk)
        elif status == GenerationStatus.REQUESTED:
            steps.generation_prepare(generation_id=generation.pk)
        elif status == GenerationStatus.TRAINING:
            steps.generation_train(generation_id=generation.pk)
        elif status == GenerationStatus.SCORING:
            for chunk in generation.run.chunks.exclude(status=ScoreChunkStatus.DONE):
                steps.score_chunk_run(chunk_id=chunk.pk)
        elif status == GenerationStatus.GRADING:
            steps.generation_grade(generation_id=generation.pk)
        elif status == GenerationStatus.SELECTING:
            steps.generation_select(generation_id=generation.pk)
        else:
            return generation
    raise AssertionError(f"{generation} did not settle: {generation.status}")
