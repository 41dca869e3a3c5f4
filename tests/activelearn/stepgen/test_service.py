from datetime import timedelta

import pytest
from django.utils import timezone

from activelearn.stepgen import OpenAICompletionsGenerator
from activelearn.stepgen.service import (
    StepPrefixError,
    candidates_generate,
    step_generator,
    step_generator_problem,
    step_prefix,
)
from annotate.celery import app
from labeling.models import (
    Assignment,
    CandidateSetStatus,
    Generation,
    LabeledStep,
    Phase,
    Problem,
    Solution,
    StepRating,
    Task,
    content_sha256,
    text_sha256,
)
from labeling.work.candidates import InMemoryCandidateStore, candidates_get, candidates_prefetch
from tests.activelearn.stepgen.completions_server import Fail, ServerState, completions_server
from tests.labeling.workflow_factories import STEPS, make_assignment, make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def phase_1_assignment() -> Assignment:
    text = "What is $1+1$?"
    problem = Problem.objects.create(unique_id="test/p1.json", problem=text, problem_sha256=text_sha256(text))
    solution = Solution.objects.create(problem=problem, steps=None, content_sha256=content_sha256(None, None))
    generation = Generation.objects.create(number=None, phase=Phase.ONE)
    task = Task.objects.create(generation=generation, solution=solution)
    assignment = make_assignment(task, labeler=make_labeler())
    first = LabeledStep.objects.create(assignment=assignment, index=0, chosen_completion=1)
    StepRating.objects.create(step=first, completion_index=0, text="We guess.", rating=-1)
    StepRating.objects.create(step=first, completion_index=1, text="We add.", rating=1)
    LabeledStep.objects.create(assignment=assignment, index=1, human_completion="So $1+1=2$.")
    return assignment


def documents_for(problem: str, steps: list[str]) -> list[str]:
    prefix = problem + "\n\n" + "".join(f"{step}\n" for step in steps)
    return [prefix + "Next we check.\n", prefix + "Then we stop.\n"]


@pytest.fixture
def openai_settings(settings):
    def configure(url: str) -> None:
        settings.STEPGEN_BACKEND = "openai"
        settings.STEPGEN_OPENAI_BASE_URL = url
        settings.STEPGEN_OPENAI_MODEL = "math-gen"
        settings.STEPGEN_K = 2
        settings.STEPGEN_RETRIES = 0

    return configure


def test_step_prefix_of_a_phase_2_task_is_the_pre_generated_steps():
    assignment = make_assignment(make_task(generation=make_generation()), labeler=make_labeler())

    problem, steps = step_prefix(assignment_id=assignment.pk, step_index=2)

    assert problem == assignment.task.solution.problem.problem
    assert steps == STEPS[:2]


def test_step_prefix_of_a_phase_1_assignment_follows_chosen_and_written_steps():
    assignment = phase_1_assignment()

    assert step_prefix(assignment_id=assignment.pk, step_index=2) == ("What is $1+1$?", ["We add.", "So $1+1=2$."])
    assert step_prefix(assignment_id=assignment.pk, step_index=0) == ("What is $1+1$?", [])


def test_step_prefix_refuses_a_step_whose_predecessors_are_not_chosen_yet():
    assignment = phase_1_assignment()

    with pytest.raises(StepPrefixError, match="has 2 steps before step 3"):
        step_prefix(assignment_id=assignment.pk, step_index=3)


def test_it_builds_the_configured_generator(settings):
    settings.STEPGEN_BACKEND = "none"
    assert step_generator() is None

    settings.STEPGEN_BACKEND = "openai"
    settings.STEPGEN_OPENAI_BASE_URL = "http://gpu-box:8000"
    settings.STEPGEN_OPENAI_MODEL = "math-gen"
    settings.STEPGEN_K = 5
    generator = step_generator()
    assert isinstance(generator, OpenAICompletionsGenerator)
    assert (generator.url, generator.model, generator.params.k) == ("http://gpu-box:8000/v1/completions", "math-gen", 5)
    assert step_generator() is generator


@pytest.fixture
def eager_celery():
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous


def test_prefetch_enqueues_after_commit_and_the_task_stores_candidates(
    openai_settings, monkeypatch, eager_celery, django_capture_on_commit_callbacks
):
    assignment = phase_1_assignment()
    store = InMemoryCandidateStore()
    # The web side claims the slot, the worker side stores the result: both find this store.
    monkeypatch.setattr("labeling.work.candidates.candidate_store", lambda: store)
    monkeypatch.setattr("activelearn.stepgen.service.candidate_store", lambda: store)
    state = ServerState(documents_for("What is $1+1$?", ["We add.", "So $1+1=2$."]))

    with completions_server(state) as url:
        openai_settings(url)
        with django_capture_on_commit_callbacks() as callbacks:
            assert candidates_prefetch(assignment_id=assignment.pk, step_index=2) is True
        pending = candidates_get(assignment_id=assignment.pk, step_index=2)
        assert pending is not None and pending.status == CandidateSetStatus.PENDING
        assert state.requests == []  # nothing runs before commit
        for callback in callbacks:
            callback()

    stored = candidates_get(assignment_id=assignment.pk, step_index=2)
    assert stored is not None
    assert stored.status == CandidateSetStatus.READY
    assert stored.texts == ("Next we check.", "Then we stop.")
    assert stored.sampling["sampling"]["model"] == "math-gen"
    assert stored.sampling["samples"] == 2


def test_prefetch_does_not_enqueue_twice_for_a_pending_or_ready_slot(
    openai_settings, django_capture_on_commit_callbacks
):
    openai_settings("http://127.0.0.1:9")
    store = InMemoryCandidateStore()
    now = timezone.now()

    with django_capture_on_commit_callbacks() as callbacks:
        assert candidates_prefetch(assignment_id=1, step_index=0, store=store, now=now) is True
        assert candidates_prefetch(assignment_id=1, step_index=0, store=store, now=now) is False
        assert candidates_prefetch(assignment_id=1, step_index=1, store=store, now=now) is True

    assert len(callbacks) == 2


def test_a_pending_slot_older_than_the_timeout_is_claimed_again(openai_settings, settings):
    openai_settings("http://127.0.0.1:9")
    store = InMemoryCandidateStore()
    then = timezone.now()
    candidates_prefetch(assignment_id=1, step_index=0, store=store, now=then)

    later = then + timedelta(seconds=settings.STEPGEN_PENDING_TIMEOUT_S + 1)
    assert candidates_prefetch(assignment_id=1, step_index=0, store=store, now=later) is True


def test_prefetch_does_nothing_when_generation_is_off(settings, django_capture_on_commit_callbacks):
    settings.STEPGEN_BACKEND = "none"
    store = InMemoryCandidateStore()

    with django_capture_on_commit_callbacks() as callbacks:
        assert candidates_prefetch(assignment_id=1, step_index=0, store=store) is False

    assert callbacks == []
    assert store.get(assignment_id=1, step_index=0) is None


def test_a_failing_server_is_stored_as_a_failure_with_its_message(openai_settings):
    assignment = phase_1_assignment()
    store = InMemoryCandidateStore()
    state = ServerState([], script=[Fail(400, "unknown model")])

    with completions_server(state) as url:
        openai_settings(url)
        stored = candidates_generate(assignment_id=assignment.pk, step_index=2, store=store)

    assert stored.status == CandidateSetStatus.FAILED
    assert f"POST {url}/v1/completions returned HTTP 400" in stored.error
    assert "unknown model" in stored.error


def test_a_failed_slot_can_be_prefetched_again(openai_settings):
    openai_settings("http://127.0.0.1:9")
    store = InMemoryCandidateStore()
    store.save_failed(assignment_id=1, step_index=0, error="boom", now=timezone.now())

    assert candidates_prefetch(assignment_id=1, step_index=0, store=store) is True


def test_a_model_that_cannot_be_loaded_is_stored_as_the_steps_failure(settings, tmp_path):
    # Raised instead, it would leave the slot pending (and the labeler waiting) until it goes stale.
    settings.STEPGEN_BACKEND = "local"
    settings.STEPGEN_LOCAL_MODEL_DIR = str(tmp_path)
    assignment = phase_1_assignment()
    store = InMemoryCandidateStore()

    stored = candidates_generate(assignment_id=assignment.pk, step_index=2, store=store)

    assert stored.status == CandidateSetStatus.FAILED
    assert f"step generator model directory {tmp_path} has no config.json" in stored.error


def test_step_generator_problem_says_why_candidates_are_unavailable_and_how_to_enable_them(settings, tmp_path):
    settings.STEPGEN_BACKEND = "none"
    assert step_generator_problem() == (
        "step generation is switched off (STEPGEN_BACKEND=none); set STEPGEN_BACKEND=local "
        "STEPGEN_LOCAL_MODEL_DIR=builtin:smollm2 (make run does)"
    )
    settings.STEPGEN_BACKEND = "local"
    settings.STEPGEN_LOCAL_MODEL_DIR = str(tmp_path)
    assert step_generator_problem() == (
        f"the local step generator cannot be loaded: step generator model directory {tmp_path} has no config.json"
    )
    (tmp_path / "config.json").write_text("{}")
    assert step_generator_problem() is None
