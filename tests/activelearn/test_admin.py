"""Generations from the admin: start one, retry a failed step, close an open one; staff only."""

from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from activelearn.models import GenerationRun
from labeling.models import Generation, GenerationStatus
from tests.labeling.admin_factories import make_staff
from tests.labeling.workflow_factories import make_generation, make_labeler

pytestmark = pytest.mark.django_db
CHANGELIST = "admin:labeling_generation_changelist"


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(make_staff())
    return client


def test_it_offers_a_start_form_with_the_default_config(staff: Client) -> None:
    page = staff.get(reverse("admin:labeling_generation_start"))
    assert page.status_code == 200
    assert b"wrong_share" in page.content  # the default GenerationConfig, as JSON
    assert b"Start a generation" in staff.get(reverse(CHANGELIST)).content


def test_it_starts_a_generation_and_queues_its_first_step_after_commit(
    staff: Client, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as queued:
        response = staff.post(
            reverse("admin:labeling_generation_start"), {"number": "4", "config": '{"k": 5, "base_model": "tiny:bert"}'}
        )

    assert response.status_code == 302
    generation = Generation.objects.get(number=4)
    assert generation.status == GenerationStatus.REQUESTED
    assert GenerationRun.objects.get(generation=generation).config["k"] == 5
    assert len(queued) == 1


def test_it_says_what_is_wrong_with_a_config(staff: Client) -> None:
    response = staff.post(reverse("admin:labeling_generation_start"), {"config": '{"wrong_share": 3}'})

    assert response.status_code == 200
    assert b"wrong_share" in response.content and b"errorlist" in response.content
    assert not Generation.objects.exists()


def test_it_refuses_a_second_running_generation(staff: Client, django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=False):
        staff.post(reverse("admin:labeling_generation_start"), {"number": "1", "config": '{"base_model": "tiny:bert"}'})
        response = staff.post(
            reverse("admin:labeling_generation_start"), {"number": "2", "config": '{"base_model": "tiny:bert"}'}
        )

    assert response.status_code == 200 and b"errorlist" in response.content
    assert list(Generation.objects.values_list("number", flat=True)) == [1]


def test_it_closes_an_open_generation(staff: Client) -> None:
    generation = make_generation(number=7)

    staff.post(reverse(CHANGELIST), {"action": "close", "index": 0, ACTION_CHECKBOX_NAME: [generation.pk]})

    generation.refresh_from_db()
    assert generation.status == GenerationStatus.CLOSED


def test_retry_explains_when_a_generation_has_not_failed(staff: Client) -> None:
    generation = make_generation(number=8)

    response = staff.post(reverse(CHANGELIST), {"action": "retry", "index": 0, ACTION_CHECKBOX_NAME: [generation.pk]})

    assert [str(m) for m in get_messages(response.wsgi_request)] == ["generation 8: generation 8 is open, not failed"]
    generation.refresh_from_db()
    assert generation.status == GenerationStatus.OPEN


def test_labelers_cannot_start_generations() -> None:
    client = Client()
    labeler = make_labeler()
    assert labeler.user is not None
    client.force_login(labeler.user)

    response = client.post(reverse("admin:labeling_generation_start"), {"config": "{}"})

    assert response.status_code == 302 and "/login/" in response["Location"]
    assert not Generation.objects.exists()


def _opened(*, number: int, score_total: int, selected: int, stats: dict[str, int]) -> Generation:
    from django.utils import timezone

    generation = make_generation(number=number, status=GenerationStatus.OPEN)
    Generation.objects.filter(pk=generation.pk).update(started_at=timezone.now())
    GenerationRun.objects.create(
        generation=generation,
        config={"k": 100, "per_problem": False, "wrong_share": 0.8},
        step=GenerationStatus.OPEN,
        score_total=score_total,
        scored=score_total,
        selected=selected,
        selection_stats=stats,
        selecting_finished_at=timezone.now(),
    )
    generation.refresh_from_db()
    return generation


@pytest.mark.django_db
def test_an_empty_pool_is_said_in_words_on_the_generation_page_and_the_dashboard(staff: Client) -> None:
    generation = _opened(number=1, score_total=0, selected=0, stats={})
    page = staff.get(reverse("admin:labeling_generation_change", args=[generation.pk])).content.decode()
    assert "The pool was empty" in page
    assert "step open" in page and "opened 20" in page  # the finish time, not "step selecting"
    listing = staff.get(reverse("admin:labeling_generation_changelist")).content.decode()
    assert "The pool was empty" in listing
    dashboard = staff.get("/dashboard/").content.decode()
    assert "Generation 1" in dashboard and "The pool was empty" in dashboard


@pytest.mark.django_db
def test_nothing_graded_wrong_and_everything_labeled_are_said_in_words(staff: Client) -> None:
    from activelearn.generations.report import generation_notes

    none_wrong = _opened(number=1, score_total=50, selected=50, stats={"candidates": 50, "wrong_answer_candidates": 0})
    (note,) = [n for n in generation_notes(generation=none_wrong, run=none_wrong.run) if "graded wrong" in n]
    assert "no convincing wrong answers" in note
    labeled = _opened(number=2, score_total=50, selected=0, stats={"candidates": 0})
    assert "already labeled or served" in generation_notes(generation=labeled, run=labeled.run)[0]
    full = _opened(
        number=3,
        score_total=500,
        selected=100,
        stats={"candidates": 500, "wrong_answer_candidates": 300, "picks_with_wrong_answer": 85},
    )
    assert generation_notes(generation=full, run=full.run) == []


START = "admin:labeling_generation_start"


@pytest.mark.parametrize(
    ("post", "message"),
    [
        ({"number": "3000000000"}, "less than or equal to 2147483647"),
        ({"number": str(10**20)}, "less than or equal to 2147483647"),
        ({"k": str(10**30)}, "less than or equal to 1000000"),
        ({"config": '{"k": 1000000000000000000000000000000}'}, "k must be an integer in [1, 1,000,000]"),
        ({"config": '{"through_generation": 100000000000000000000}'}, "through_generation must be an integer"),
        ({"k": "5", "config": '{"k": 6}'}, "set it in one place"),
        ({"wrong_share": "1.5"}, "less than or equal to 1"),
    ],
)
def test_out_of_range_numbers_are_form_errors_not_server_errors(staff: Client, post: dict[str, str], message: str):
    response = staff.post(reverse(START), {"phase": "2", "base_model": "tiny:bert", **post})

    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    assert message in response.content.decode().replace("&#x27;", "'")
    assert not Generation.objects.exists()


def test_the_common_config_keys_are_fields_and_the_rest_stays_json(
    staff: Client, django_capture_on_commit_callbacks
) -> None:
    page = staff.get(reverse(START)).content.decode()
    for name in ("phase", "k", "per_problem", "wrong_share", "split", "qc_items", "retrain", "base_model", "config"):
        assert f'name="{name}"' in page
    with django_capture_on_commit_callbacks(execute=False):
        response = staff.post(
            reverse(START),
            {
                "phase": "2",
                "k": "7",
                "per_problem": "yes",
                "wrong_share": "0.5",
                "split": "test",
                "base_model": "tiny:bert",
                "config": '{"neutral_as": "negative"}',
            },
        )

    assert response.status_code == 302
    config = GenerationRun.objects.get().config
    assert (config["k"], config["per_problem"], config["wrong_share"], config["split"]) == (7, True, 0.5, "test")
    assert config["neutral_as"] == "negative"


def test_a_research_admin_opens_phase_one_work_from_the_start_form(staff: Client) -> None:
    from labeling.models import Phase, Problem, SelectionReason, Task, text_sha256

    for index in range(3):
        Problem.objects.create(
            unique_id=f"p1/{index}", problem=f"Problem {index}", problem_sha256=text_sha256(str(index))
        )
    page = staff.get(reverse(START)).content.decode()
    assert '<option value="1">phase 1</option>' in page

    response = staff.post(reverse(START), {"phase": "1", "k": "2"})

    assert response.status_code == 302
    phase_one = Generation.objects.get(phase=Phase.ONE)
    assert (phase_one.number, phase_one.status) == (None, GenerationStatus.OPEN)
    tasks = list(Task.objects.filter(generation=phase_one).select_related("solution"))
    assert len(tasks) == 2
    assert all(t.solution.steps is None and t.selection_reason == SelectionReason.UNIFORM for t in tasks)
    again = staff.post(reverse(START), {"phase": "1", "k": "5"}, follow=True)
    assert "Phase 1: 1 problem(s) opened for labeling (only 1 not yet served in phase 1)" in again.content.decode()
    assert Task.objects.filter(generation=phase_one).values("solution__problem").distinct().count() == 3


def test_a_training_generation_says_its_step_epoch_and_time_left(staff: Client) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from activelearn.models import CheckpointStatus, PRMCheckpoint

    checkpoint = PRMCheckpoint.objects.create(
        base_model="tiny:bert",
        status=CheckpointStatus.TRAINING,
        steps_done=100,
        steps_total=400,
        hyperparameters={"train": {"num_epochs": 4}},
        started_at=timezone.now() - timedelta(seconds=60),
    )
    generation = make_generation(number=3, status=GenerationStatus.TRAINING)
    GenerationRun.objects.create(
        generation=generation, config={}, step=GenerationStatus.TRAINING, checkpoint=checkpoint,
        training_started_at=timezone.now(),
    )  # fmt: skip

    page = staff.get(reverse("admin:labeling_generation_change", args=[generation.pk])).content.decode()

    assert (
        f"Training checkpoint #{checkpoint.pk} (backbone tiny:bert): step 100 of 400, epoch 2 of 4, about 3 min" in page
    )


def test_an_open_generation_says_what_it_trained_graded_and_picked(staff: Client) -> None:
    from activelearn.models import CheckpointStatus, PRMCheckpoint, ScoreChunk
    from labeling.models import GRADING_NO_ANSWER, Solution
    from tests.labeling.workflow_factories import make_task

    generation = _opened(
        number=2,
        score_total=4,
        selected=3,
        stats={"candidates": 4, "wrong_answer_candidates": 2, "picks_with_wrong_answer": 2, "wrong_answer_picks": 2,
               "other_picks": 1, "wrong_answer_picks_passing_threshold": 1},
    )  # fmt: skip
    checkpoint = PRMCheckpoint.objects.create(
        base_model="tiny:bert",
        status=CheckpointStatus.READY,
        path="/nowhere",
        trained_through_generation=1,
        metrics={"train_solutions": 40, "validation_solutions": 10, "labeled_steps_seen": 321, "epochs": 2,
                 "val_auroc": 0.8125},
    )  # fmt: skip
    from django.utils import timezone

    GenerationRun.objects.filter(generation=generation).update(
        checkpoint=checkpoint, training_started_at=timezone.now(), grading_finished_at=timezone.now()
    )
    solutions = [make_task(generation=make_generation(number=9 + i)).solution for i in range(4)]
    Solution.objects.filter(pk=solutions[0].pk).update(is_correct=True, grading_note="graded")
    Solution.objects.filter(pk__in=[solutions[1].pk, solutions[2].pk]).update(is_correct=False, grading_note="graded")
    Solution.objects.filter(pk=solutions[3].pk).update(grading_note=GRADING_NO_ANSWER)
    ids = [s.pk for s in solutions]
    ScoreChunk.objects.create(run=generation.run, first_id=min(ids), last_id=max(ids), solution_ids=ids)

    page = staff.get(reverse("admin:labeling_generation_change", args=[generation.pk])).content.decode()

    assert "Every step yielded what was asked" not in page
    assert (
        f"Trained checkpoint #{checkpoint.pk} (backbone tiny:bert) on 50 labelled solutions (40 to train, 10 to "
        "validate; 321 labelled steps seen, 2 epoch(s), labels through generation 1); validation step AUROC 0.812"
    ) in page
    assert "Graded the pool: 1 correct, 2 wrong, 1 without an answer, 0 without a reference answer" in page
    assert "Selected 3: 2 with a wrong answer" in page
    listing = staff.get(reverse("admin:activelearn_prmcheckpoint_changelist")).content.decode()
    assert '<td class="field-trained_through">1</td>' in listing


def test_sample_n_per_problem_is_a_field_that_starts_the_generation_by_sampling(
    staff: Client, settings, django_capture_on_commit_callbacks
) -> None:
    settings.SAMPLING_BACKEND = "openai"
    settings.SAMPLING_OPENAI_BASE_URL = "http://127.0.0.1:9"
    settings.SAMPLING_OPENAI_MODEL = "math-gen"
    assert 'name="sample_n"' in staff.get(reverse(START)).content.decode()

    with django_capture_on_commit_callbacks(execute=False):
        response = staff.post(reverse(START), {"phase": "2", "sample_n": "4", "base_model": "tiny:bert"})

    assert response.status_code == 302
    generation = Generation.objects.get()
    assert generation.status == GenerationStatus.SAMPLING
    assert GenerationRun.objects.get(generation=generation).config["sample_n"] == 4


def test_sample_n_without_a_configured_generator_is_a_form_error(staff: Client, settings) -> None:
    settings.SAMPLING_BACKEND = "none"

    response = staff.post(reverse(START), {"phase": "2", "sample_n": "4", "base_model": "tiny:bert"})

    assert response.status_code == 200
    assert "sample_n needs a generator: set SAMPLING_BACKEND=openai" in response.content.decode()
    assert not Generation.objects.exists()
