"""Phase 1: the labeler rates K candidates per step, writes their own when none is good,
and the solution continues from a chosen step until a final answer (labeling.work.phase_one).

The generator is a fake implementing the StepGenerator protocol; it is "the worker"
only in the sense that the test calls candidates_generate itself. Storage is the real
database store.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from django.core.management import call_command

from activelearn.checkpoints.training_data import labeled_solutions_list
from activelearn.stepgen import SamplingRecord, StepCandidates, StepGenerationError
from activelearn.stepgen.service import candidates_generate, step_prefix
from labeling.models import (
    Assignment,
    AssignmentStatus,
    FinishReason,
    Generation,
    GenerationStatus,
    LabeledStep,
    Phase,
    Problem,
    Solution,
    StepCandidateSet,
    StepRating,
    Task,
    content_sha256,
    text_sha256,
)
from labeling.work.assignment import NotFinished, RatingRejected
from labeling.work.phase_one import OWN_STEP, phase_one_continue, phase_one_rate, phase_one_screen
from labeling.work.queue import assignment_next
from labeling.work.rating import assignment_submit
from tests.labeling.workflow_factories import make_labeler

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
FIRST = ["Let $x$ be the numerator.", "We guess $x = 3$.", "So the denominator is $3x-7$."]
SECOND = ["Then $5x = 2(3x-7)$, so $x = 14$.", "# Answer\n\n14", "So $x$ is big."]


class FakeGenerator:
    """StepGenerator: fixed candidates per step, or an error."""

    name = "fake"

    def __init__(self, by_step: dict[int, list[str]], *, error: str = "") -> None:
        self.by_step = by_step
        self.error = error
        self.calls: list[list[str]] = []

    def generate(self, *, problem: str, steps: Sequence[str], seed: int | None = None) -> StepCandidates:
        self.calls.append(list(steps))
        if self.error:
            raise StepGenerationError(self.error)
        texts = tuple(self.by_step[len(steps)])
        record = SamplingRecord("fake", "fake-model", 3, 1.0, 1.0, 64, None, ("\n",), "{problem}\n\n{steps}")
        return StepCandidates(texts=texts, sampling=record, samples=len(texts))


@pytest.fixture(autouse=True)
def generation_on(settings):
    # Generation "on" so prefetches claim slots; the queued task never runs here
    # (on_commit callbacks are not run inside the test transaction).
    settings.STEPGEN_BACKEND = "openai"
    settings.STEPGEN_OPENAI_BASE_URL = "http://127.0.0.1:9"
    settings.STEPGEN_OPENAI_MODEL = "fake-model"
    settings.STEPGEN_CANDIDATE_STORE = "labeling.work.candidates.DatabaseCandidateStore"


def make_phase_one_task(*, answer: str = "14") -> Task:
    text = "The denominator of a fraction is 7 less than 3 times the numerator. Find the numerator."
    problem = Problem.objects.create(
        unique_id=f"test/p1-{Problem.objects.count()}.json",
        problem=text,
        problem_sha256=text_sha256(text),
        answer=answer,
        solution="hidden ref",
    )
    solution = Solution.objects.create(problem=problem, steps=None, content_sha256=content_sha256(None, None))
    generation, _ = Generation.objects.get_or_create(
        number=None, phase=Phase.ONE, defaults={"status": GenerationStatus.OPEN}
    )
    return Task.objects.create(generation=generation, solution=solution)


@pytest.fixture
def assignment() -> Assignment:
    task = make_phase_one_task()
    labeler = make_labeler(name="p1")
    leased = assignment_next(labeler=labeler)
    assert leased is not None and leased.task_id == task.pk
    return leased


def run_worker(assignment: Assignment, step_index: int, generator: FakeGenerator | None = None) -> None:
    candidates_generate(
        assignment_id=assignment.pk,
        step_index=step_index,
        generator=generator or FakeGenerator({0: FIRST, 1: SECOND}),
    )


def rate_all(assignment: Assignment, step_index: int, ratings: list[int], *, start_version: int = 1) -> int:
    version = start_version
    for completion_index, rating in enumerate(ratings):
        assert phase_one_rate(
            assignment=assignment,
            step_index=step_index,
            completion_index=completion_index,
            rating=rating,
            flagged=False,
            version=version,
        )
        version += 1
    return version


def test_it_serves_a_phase_one_task_and_asks_for_the_first_step_on_the_first_view(client, assignment):
    client.force_login(assignment.labeler.user)

    response = client.get(f"/assignments/{assignment.pk}/")

    assert response.status_code == 200
    assert b"Generating candidate steps" in response.content
    assert b'hx-trigger="load delay:1s"' in response.content  # the card polls itself
    slot = StepCandidateSet.objects.get(assignment=assignment, step_index=0)
    assert slot.status == "pending"


def test_it_shows_candidates_when_ready_and_stops_polling(client, assignment):
    client.force_login(assignment.labeler.user)
    client.get(f"/assignments/{assignment.pk}/")
    run_worker(assignment, 0)

    response = client.get(f"/assignments/{assignment.pk}/", **HTMX)

    content = response.content.decode()
    assert "Generating candidate steps" not in content
    for i in range(3):
        assert f'id="c-0-{i}"' in content
    assert 'data-completions="3"' in content


def test_a_rating_stores_every_candidate_with_its_text_and_is_versioned(client, assignment):
    client.force_login(assignment.labeler.user)
    client.get(f"/assignments/{assignment.pk}/")
    run_worker(assignment, 0)
    url = f"/assignments/{assignment.pk}/phase-one/0/1/"

    response = client.post(url, {"rating": "-1", "flagged": "1", "version": "5"}, **HTMX)

    assert response.status_code == 200
    assert response["X-Rating-Version"] == f"{assignment.pk}:5"
    rows = list(
        StepRating.objects.filter(step__assignment=assignment).values_list(
            "completion_index", "text", "rating", "flagged"
        )
    )
    assert rows == [(0, FIRST[0], None, None), (1, FIRST[1], -1, True), (2, FIRST[2], None, None)]
    # A repeat and an older click change nothing.
    assert not phase_one_rate(
        assignment=assignment, step_index=0, completion_index=1, rating=1, flagged=False, version=5
    )
    assert not phase_one_rate(
        assignment=assignment, step_index=0, completion_index=1, rating=1, flagged=False, version=4
    )
    assert StepRating.objects.get(step__assignment=assignment, completion_index=1).rating == -1


def test_it_refuses_a_rating_before_the_candidates_are_ready(assignment):
    with pytest.raises(RatingRejected, match="not ready"):
        phase_one_rate(assignment=assignment, step_index=0, completion_index=0, rating=1, flagged=False, version=1)


def test_continue_needs_every_candidate_rated(client, assignment):
    run_worker(assignment, 0)
    rate_all(assignment, 0, [1, 0])

    with pytest.raises(RatingRejected, match="Rate every candidate"):
        phase_one_continue(assignment=assignment, step_index=0, choice=None, human_text="", version=9)


def test_without_a_good_candidate_the_labeler_must_write_their_own_step(client, assignment):
    client.force_login(assignment.labeler.user)
    run_worker(assignment, 0)
    rate_all(assignment, 0, [0, -1, 0])

    response = client.post(
        f"/assignments/{assignment.pk}/phase-one/0/continue/", {"version": "9", "human": " "}, **HTMX
    )

    assert response.status_code == 422
    assert b"write your own step" in response.content
    assert LabeledStep.objects.get(assignment=assignment, index=0).human_completion is None


def test_the_own_step_becomes_the_human_completion_and_the_next_prefix(django_capture_on_commit_callbacks, assignment):
    run_worker(assignment, 0)
    rate_all(assignment, 0, [0, -1, -1])

    with django_capture_on_commit_callbacks() as callbacks:
        outcome = phase_one_continue(
            assignment=assignment, step_index=0, choice=None, human_text="Call the numerator $n$.", version=9
        )

    assert outcome.applied and outcome.chosen is None and outcome.finished is None
    step = LabeledStep.objects.get(assignment=assignment, index=0)
    assert (step.chosen_completion, step.human_completion) == (None, "Call the numerator $n$.")
    assert step_prefix(assignment_id=assignment.pk, step_index=1)[1] == ["Call the numerator $n$."]
    assert len(callbacks) == 1  # the next step's candidates are queued after commit
    assert StepCandidateSet.objects.get(assignment=assignment, step_index=1).status == "pending"


def test_by_default_the_solution_continues_from_a_random_good_candidate(assignment):
    run_worker(assignment, 0)
    rate_all(assignment, 0, [1, -1, 1])

    outcome = phase_one_continue(
        assignment=assignment, step_index=0, choice=None, human_text="", version=9, rng=random.Random(3)
    )

    assert outcome.chosen in (0, 2)
    assert LabeledStep.objects.get(assignment=assignment, index=0).chosen_completion == outcome.chosen


def test_the_labeler_may_pick_an_okay_candidate_but_not_a_bad_one(assignment):
    run_worker(assignment, 0)
    rate_all(assignment, 0, [1, -1, 0])

    with pytest.raises(RatingRejected, match="good or okay"):
        phase_one_continue(assignment=assignment, step_index=0, choice=1, human_text="", version=9)
    outcome = phase_one_continue(assignment=assignment, step_index=0, choice=2, human_text="", version=9)

    assert outcome.chosen == 2


def test_deciding_a_step_twice_is_a_no_op_and_later_ratings_of_it_are_refused(assignment):
    run_worker(assignment, 0)
    rate_all(assignment, 0, [1, 0, 0])
    phase_one_continue(assignment=assignment, step_index=0, choice=0, human_text="", version=9)

    again = phase_one_continue(assignment=assignment, step_index=0, choice=1, human_text="", version=10)

    assert not again.applied and again.chosen == 0
    with pytest.raises(RatingRejected, match="already decided"):
        phase_one_rate(assignment=assignment, step_index=0, completion_index=0, rating=-1, flagged=False, version=11)


def test_an_accepted_final_answer_ends_the_task_and_exports_a_phase_one_record(client, assignment, tmp_path):
    client.force_login(assignment.labeler.user)
    run_worker(assignment, 0)
    rate_all(assignment, 0, [1, -1, 0])
    phase_one_continue(assignment=assignment, step_index=0, choice=0, human_text="", version=9)
    run_worker(assignment, 1)
    rate_all(assignment, 1, [1, 1, 0], start_version=10)

    response = client.post(
        f"/assignments/{assignment.pk}/phase-one/1/continue/", {"version": "20", "choice": "1"}, **HTMX
    )

    assert response.status_code == 200
    assignment.refresh_from_db()
    assert (assignment.status, assignment.finish_reason) == (AssignmentStatus.SUBMITTED, FinishReason.SOLUTION)
    out = tmp_path / "p1.jsonl"
    call_command("export_prm800k", "--output", str(out), "--no-progress")
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["generation"] is None
    assert record["question"]["pre_generated_steps"] is None
    assert record["label"]["finish_reason"] == "solution"
    steps = record["label"]["steps"]
    assert [[c["text"] for c in s["completions"]] for s in steps] == [FIRST, SECOND]
    assert [[c["rating"] for c in s["completions"]] for s in steps] == [[1, -1, 0], [1, 1, 0]]
    assert [(s["chosen_completion"], s["human_completion"]) for s in steps] == [(0, None), (1, None)]
    trajectory = [
        s["human_completion"] if s["chosen_completion"] is None else s["completions"][s["chosen_completion"]]["text"]
        for s in steps
    ]
    assert trajectory == [FIRST[0], "# Answer\n\n14"]


def test_training_uses_every_rated_candidate_and_the_own_step(assignment):
    run_worker(assignment, 0)
    rate_all(assignment, 0, [0, -1, -1])
    phase_one_continue(assignment=assignment, step_index=0, choice=OWN_STEP, human_text="Let $n$ be it.", version=9)
    run_worker(assignment, 1)
    rate_all(assignment, 1, [-1, 1, 0], start_version=10)
    phase_one_continue(assignment=assignment, step_index=1, choice=1, human_text="", version=20)

    (solution,) = labeled_solutions_list()

    first, second = solution.steps
    assert [(c.text, c.rating) for c in first.completions] == [
        (FIRST[0], 0),
        (FIRST[1], -1),
        (FIRST[2], -1),
        ("Let $n$ be it.", 1),
    ]
    assert first.chosen == 3
    assert [(c.text, c.rating) for c in second.completions] == list(zip(SECOND, [-1, 1, 0], strict=True))
    assert second.chosen == 1


def test_a_failed_generation_says_so_and_retry_queues_it_again(client, assignment):
    client.force_login(assignment.labeler.user)
    client.get(f"/assignments/{assignment.pk}/")
    run_worker(assignment, 0, FakeGenerator({}, error="POST http://gpu-box/v1/completions returned HTTP 500"))

    page = client.get(f"/assignments/{assignment.pk}/").content.decode()
    assert "could not propose candidates" in page and "HTTP 500" in page

    response = client.post(f"/assignments/{assignment.pk}/phase-one/0/retry/", **HTMX)

    assert response.status_code == 200
    assert StepCandidateSet.objects.get(assignment=assignment, step_index=0).status == "pending"


def test_after_a_failure_the_labeler_may_write_the_step_themselves(assignment):
    run_worker(assignment, 0, FakeGenerator({}, error="boom"))

    outcome = phase_one_continue(
        assignment=assignment, step_index=0, choice=OWN_STEP, human_text="Let $x$ be it.", version=1
    )

    assert outcome.applied
    step = LabeledStep.objects.get(assignment=assignment, index=0)
    assert (step.human_completion, step.ratings.count()) == ("Let $x$ be it.", 0)


def test_give_up_ends_a_phase_one_task_with_the_current_step_undecided(client, assignment):
    client.force_login(assignment.labeler.user)
    run_worker(assignment, 0)
    rate_all(assignment, 0, [1, 0, 0])

    client.post(f"/assignments/{assignment.pk}/give-up/", {"reason": "not my topic"})

    assignment.refresh_from_db()
    assert assignment.finish_reason == FinishReason.GIVE_UP
    assert LabeledStep.objects.get(assignment=assignment, index=0).chosen_completion is None


def test_the_phase_two_submit_refuses_a_phase_one_assignment(assignment):
    with pytest.raises(NotFinished):
        assignment_submit(assignment_id=assignment.pk, user_id=None)


def test_another_labelers_assignment_is_not_found(client, assignment):
    run_worker(assignment, 0)
    client.force_login(make_labeler(name="other").user)

    response = client.post(
        f"/assignments/{assignment.pk}/phase-one/0/0/", {"rating": "1", "flagged": "0", "version": "1"}
    )

    assert response.status_code == 404
    assert not StepRating.objects.filter(step__assignment=assignment).exists()


def test_the_click_routes_take_only_post(client, assignment):
    client.force_login(assignment.labeler.user)

    assert client.get(f"/assignments/{assignment.pk}/phase-one/0/0/").status_code == 405
    assert client.get(f"/assignments/{assignment.pk}/phase-one/0/continue/").status_code == 405


def test_the_screen_is_resumable_from_the_stored_rows(assignment):
    run_worker(assignment, 0)
    rate_all(assignment, 0, [1, 0, -1])
    phase_one_continue(assignment=assignment, step_index=0, choice=0, human_text="", version=9)
    run_worker(assignment, 1)
    phase_one_rate(assignment=assignment, step_index=1, completion_index=0, rating=0, flagged=True, version=12)

    screen = phase_one_screen(assignment=Assignment.objects.get(pk=assignment.pk))

    assert [(s.index, s.text, s.chosen) for s in screen.decided] == [(0, FIRST[0], 0)]
    assert screen.step_index == 1
    assert [(c.text, c.rating, c.flagged) for c in screen.candidates] == [
        (SECOND[0], 0, True),
        (SECOND[1], None, False),
        (SECOND[2], None, False),
    ]
    assert screen.current_key == "c-1-1"
    assert screen.version == 12


def test_roundtrip_of_phase_one_labels_through_export_and_import(assignment, tmp_path):
    run_worker(assignment, 0)
    rate_all(assignment, 0, [0, -1, -1])
    phase_one_continue(assignment=assignment, step_index=0, choice=None, human_text="Let $n$ be it.", version=9)
    run_worker(assignment, 1)
    rate_all(assignment, 1, [-1, 1, 0], start_version=10)
    phase_one_continue(assignment=assignment, step_index=1, choice=1, human_text="", version=20)

    assert export_import_export(tmp_path)


def export_import_export(tmp_path: Path) -> bool:
    """Export, wipe the labeling tables, import the file, export again: the same bytes?"""
    first = tmp_path / "first.jsonl"
    call_command("export_prm800k", "--output", str(first), "--no-progress")
    Assignment.objects.all().delete()
    Task.objects.all().delete()
    Solution.objects.all().delete()
    Problem.objects.all().delete()
    Generation.objects.all().delete()
    call_command("import_prm800k", str(first))
    second = tmp_path / "second.jsonl"
    call_command("export_prm800k", "--output", str(second), "--no-progress")
    assert first.read_text().count("\n") == 1
    assert json.loads(first.read_text()) == json.loads(second.read_text())
    return first.read_bytes() == second.read_bytes()
