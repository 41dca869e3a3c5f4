"""The order a generation's tasks are served in, through the selection step and the real queue."""

from __future__ import annotations

import pytest
from django.utils import timezone

from activelearn.generations import steps
from activelearn.generations.config import GenerationConfig
from activelearn.models import CheckpointStatus, GenerationRun, PRMCheckpoint, ScoreChunk, SolutionScore
from labeling.models import (
    Generation,
    GenerationStatus,
    Phase,
    Problem,
    SelectionReason,
    Solution,
    Task,
    content_sha256,
    text_sha256,
)
from labeling.work.queue import assignment_next
from tests.labeling.workflow_factories import make_labeler

pytestmark = pytest.mark.django_db


def _selecting(*, correct: int, wrong: int, k: int, wrong_share: float) -> Generation:
    """A generation at its selection step, its pool scored by a READY checkpoint: the correct
    answers score higher than any wrong one (the PRM likes them more, as it usually does)."""
    checkpoint = PRMCheckpoint.objects.create(
        base_model="tiny:bert", status=CheckpointStatus.READY, path="/nowhere", threshold=0.5
    )
    generation = Generation.objects.create(number=1, phase=Phase.TWO, status=GenerationStatus.SELECTING)
    run = GenerationRun.objects.create(
        generation=generation,
        config=GenerationConfig(k=k, wrong_share=wrong_share, base_model="tiny:bert").to_json(),
        step=GenerationStatus.SELECTING,
        checkpoint=checkpoint,
        step_started_at=timezone.now(),
    )
    ids = []
    for index in range(correct + wrong):
        text = f"Problem {index}: compute it."
        problem = Problem.objects.create(
            unique_id=f"order/{index}", problem=text, problem_sha256=text_sha256(text), answer="42"
        )
        is_wrong = index >= correct
        steps = [f"step of solution {index}", f"so the answer is {41 if is_wrong else 42}"]
        solution = Solution.objects.create(
            problem=problem,
            steps=steps,
            content_sha256=content_sha256(steps, None),
            is_correct=not is_wrong,
            grading_note="graded",
        )
        score = (0.99 - index / 1000) if not is_wrong else (0.7 - index / 1000)
        SolutionScore.objects.create(
            solution=solution, checkpoint=checkpoint, score=score, step_scores=[0.9, score], reduction="min"
        )
        ids.append(solution.pk)
    ScoreChunk.objects.create(run=run, first_id=ids[0], last_id=ids[-1], solution_ids=ids)
    return generation


def _served(count: int) -> list[Task]:
    """The tasks the queue hands out, in order, to ``count`` labelers asking one after another."""
    served = []
    for _ in range(count):
        assignment = assignment_next(labeler=make_labeler())
        assert assignment is not None
        served.append(assignment.task)
    return served


def test_every_prefix_of_the_queue_keeps_the_wrong_answer_share(settings):
    settings.QC_RATE = 0.0
    generation = _selecting(correct=40, wrong=120, k=100, wrong_share=0.8)

    assert steps.generation_select(generation_id=generation.pk) == 100

    tasks = Task.objects.filter(generation=generation)
    assert sum(t.solution.is_correct is False for t in tasks) == 80
    served = _served(20)
    wrong_so_far = 0
    for position, task in enumerate(served, start=1):
        wrong_so_far += task.solution.is_correct is False
        assert abs(wrong_so_far - 0.8 * position) <= 0.5, (position, wrong_so_far)
    # Each kind is served most convincing first, and the record keeps the PRM's score.
    wrong_scores = [_score(t) for t in served if t.solution.is_correct is False]
    assert wrong_scores == sorted(wrong_scores, reverse=True)
    assert all(t.verifier_score == SolutionScore.objects.get(solution=t.solution).score for t in served)


def test_each_task_records_why_it_was_picked():
    generation = _selecting(correct=5, wrong=10, k=10, wrong_share=0.8)

    steps.generation_select(generation_id=generation.pk)

    reasons = {
        t.solution.is_correct: t.selection_reason
        for t in Task.objects.filter(generation=generation).select_related("solution")
    }
    assert reasons == {
        False: SelectionReason.CONVINCING_WRONG_ANSWER,
        True: SelectionReason.CONVINCING_CORRECT,
    }


def _score(task: Task) -> float:
    assert task.verifier_score is not None, f"task {task.pk} has no verifier score"
    return task.verifier_score
