"""The staff dashboard, its export status cards, and export jobs run by a real Celery worker."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from activelearn.models import CheckpointStatus, PRMCheckpoint
from labeling.data.exportjobs import export_job_create, export_job_run
from labeling.data.exports import ExportFilters
from labeling.models import ExportFormat, ExportJob, ExportJobStatus, Labeler, TaskKind
from labeling.tasks import run_export_job
from tests.labeling.admin_factories import make_labeled_generation, make_staff, make_submitted
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task


def _user(labeler: Labeler) -> User:
    assert labeler.user is not None
    return labeler.user


@pytest.fixture
def staff_client(db: None) -> Client:
    client = Client()
    client.force_login(make_staff())
    return client


@pytest.mark.django_db
def test_it_is_staff_only() -> None:
    assert reverse("admin:login") in Client().get("/dashboard/")["Location"]
    client = Client()
    client.force_login(_user(make_labeler()))
    assert reverse("admin:login") in client.get("/dashboard/")["Location"]
    assert client.post("/dashboard/exports/", {"format": "prm800k"}).status_code == 302
    assert not ExportJob.objects.exists()


@pytest.mark.django_db
def test_it_plots_the_campaign(staff_client: Client, django_assert_max_num_queries: Any) -> None:
    make_labeled_generation(solutions=3)
    open_generation = make_generation(number=1)
    for _ in range(4):
        make_task(generation=open_generation)
    PRMCheckpoint.objects.create(
        base_model="tiny", status=CheckpointStatus.TRAINING, metrics={"val_loss": 0.7, "val_auroc": 0.61}
    )
    PRMCheckpoint.objects.create(
        base_model="tiny",
        status=CheckpointStatus.TRAINING,
        metrics={"val_loss": 0.5, "val_auroc": 0.72, "train_solutions": 118},
        calibration={"first_error": {"f1": 0.4}},
    )
    with django_assert_max_num_queries(20):
        response = staff_client.get("/dashboard/")
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count("<svg") >= 8
    assert "gen 0: 15" in page  # step labels of generation 0 (3 solutions x 5 steps)
    assert "+1: 12" in page  # 12 of the 15 are +1, 3 are neutral
    assert "gen 1: 4" in page  # open tasks
    # One quantity per chart: scores on a 0-1 axis, losses on their own, counts in the table only.
    assert "step AUROC @ #" in page and ": 0.72</title>" in page
    assert "first-error F1 @ #" in page and ": 0.4</title>" in page
    assert "validation @ #" in page
    assert "<td>118</td>" in page and "118.0" not in page
    assert "<td>0.720</td>" in page


@pytest.mark.django_db
def test_its_colours_follow_the_rating_and_answer_colours_of_the_product(staff_client: Client) -> None:
    from labeling.staff.charts import ANSWER_COLOURS, RATING_COLOURS

    make_labeled_generation(solutions=2)
    page = staff_client.get("/dashboard/").content.decode()
    assert RATING_COLOURS["+1"] == ANSWER_COLOURS["correct"] == "#16a34a"  # green
    assert RATING_COLOURS["-1"] == ANSWER_COLOURS["wrong"] == "#dc2626"  # red
    assert len(set(ANSWER_COLOURS.values())) == 4  # correct, wrong, no answer, ungraded told apart
    for colour in RATING_COLOURS.values():
        assert f'fill="{colour}"' in page
    assert 'fill="#cbd5e1"' in page  # the ungraded legend swatch


@pytest.mark.django_db
def test_it_is_linked_from_the_admin_index_and_the_top_bar(staff_client: Client) -> None:
    assert 'href="/dashboard/"' in staff_client.get("/admin/").content.decode()
    assert 'href="/dashboard/"' in staff_client.get("/admin/labeling/problem/").content.decode()
    assert 'href="/dashboard/"' in staff_client.get("/").content.decode()


@pytest.mark.django_db
def test_it_shows_solutions_without_an_answer_apart_from_wrong_ones(staff_client: Client) -> None:
    generation = make_generation(number=2)
    verdicts = [(True, "equivalent"), (False, "different"), (None, "no answer found"), (None, "")]
    for correct, note in verdicts:
        solution = make_task(generation=generation).solution
        solution.is_correct, solution.grading_note = correct, note
        solution.save(update_fields=["is_correct", "grading_note"])
    page = staff_client.get("/dashboard/").content.decode()
    for part in ("correct", "wrong", "no answer", "ungraded"):
        assert f"gen 2, {part}: 1 (25.0 %)" in page


@pytest.mark.django_db
def test_it_shows_agreement_with_gold_per_labeler(staff_client: Client) -> None:
    from labeling.models import Task
    from labeling.quality.gold import GoldStepSpec, gold_set

    generation = make_generation(number=0)
    task = make_task(generation=generation, steps=["a", "b"])
    gold_set(
        solution=task.solution,
        steps=[GoldStepSpec(step_index=1, negative_ok=True, neutral_ok=False, positive_ok=False)],
    )
    Task.objects.filter(pk=task.pk).update(kind=TaskKind.QUALITY_CONTROL, is_quality_control=True)
    labeler = make_labeler(name="carol")
    make_submitted(task=task, labeler=labeler, ratings=[1, -1], finish_reason="found_error")
    page = staff_client.get("/dashboard/").content.decode()
    assert "carol" in page
    assert "100 %" in page


@pytest.mark.django_db
def test_it_starts_an_export_and_returns_a_polling_card(
    staff_client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = staff_client.post(
            "/dashboard/exports/", {"format": "stepwise", "neutral": "drop"}, HTTP_HX_REQUEST="true"
        )
    job = ExportJob.objects.get()
    assert len(callbacks) == 1
    assert job.filters["neutral"] == "drop"
    card = response.content.decode()
    assert f'id="export-{job.pk}"' in card
    assert 'hx-trigger="every 2s"' in card
    assert "<html" not in card


@pytest.mark.django_db
def test_it_stops_polling_when_the_job_is_done(staff_client: Client, settings: Any, tmp_path: Path) -> None:
    settings.EXPORT_DIR = tmp_path
    make_labeled_generation(solutions=2)
    job = ExportJob.objects.create(format=ExportFormat.PRM800K)
    url = reverse("dashboard-export-job", args=[job.pk])
    assert 'hx-trigger="every 2s"' in staff_client.get(url, HTTP_HX_REQUEST="true").content.decode()
    export_job_run(job_id=job.pk)
    card = staff_client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert "hx-trigger" not in card
    assert "2 rows" in card
    assert "download" in card


@pytest.mark.django_db
def test_it_records_a_failed_export(settings: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    settings.EXPORT_DIR = blocker
    job = ExportJob.objects.create(format=ExportFormat.PRM800K)
    with pytest.raises(OSError):
        export_job_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == ExportJobStatus.FAILED
    assert job.error
    assert export_job_run(job_id=job.pk) is None  # a redelivered message leaves it alone


@pytest.mark.celery_worker
@pytest.mark.slow
def test_it_runs_an_export_job_in_a_real_worker(celery_worker_process: Any, settings: Any, tmp_path: Path) -> None:
    assert settings.CELERY_TASK_ALWAYS_EAGER is False
    make_labeled_generation(solutions=3)
    job = ExportJob.objects.create(format=ExportFormat.STEPWISE, filters={"neutral": "negative"})
    run_export_job.apply_async(kwargs={"job_id": job.pk}, queue=celery_worker_process.queue)
    deadline = time.monotonic() + 60
    while True:
        job.refresh_from_db()
        if job.is_finished or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert job.status == ExportJobStatus.DONE, celery_worker_process.output()
    assert job.records == 3
    lines = Path(job.path).read_text().splitlines()
    assert len(lines) == 3
    assert '"labels":[true,false,true,true,true]' in lines[0]


@pytest.mark.django_db
def test_it_enqueues_only_after_commit(django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        job = export_job_create(
            export_format=ExportFormat.PRM800K, filters=ExportFilters(finished_only=True), requested_by=None
        )
    assert len(callbacks) == 1
    assert job.filters["finished_only"] is True
    assert "neutral" not in job.filters


@pytest.mark.django_db
def test_it_shows_held_out_evaluations_beside_their_baselines(staff_client: Client) -> None:
    evaluation = {
        "labeled_solutions": 86,
        "step_auroc": 0.7512,
        "first_error": {"f1": 0.3123},
        "first_error_baselines": {"random_at_prior": {"f1": 0.1087}},
        "best_of_n": {
            "4": {"problems": 40, "skipped": 0, "prm": 0.5, "weighted": 0.6, "majority": 0.6, "random": 0.4},
            "16": {
                "problems": 38,
                "skipped": 2,
                "prm": 0.4711,
                "weighted": 0.6623,
                "majority": 0.6401,
                "random": 0.3902,
                "oracle": 0.8903,
            },
        },
    }
    checkpoint = PRMCheckpoint.objects.create(
        base_model="tiny",
        status=CheckpointStatus.TRAINING,
        threshold=0.8123,
        aggregation="min",
        evaluation={"split:test": evaluation},
    )
    page = staff_client.get("/dashboard/").content.decode()
    row = page[page.index("split:test") :]
    row = row[: row.index("</tr>")]
    # Held-out set (labeled solutions), AUROC, F1, the largest N, the PRM's pick and majority
    # vote; the other baselines are on the checkpoint's admin page.
    for text in ("(86)", "<td>0.751</td>", "<td>0.312</td>", "<td>16</td>", "<td>0.471</td>", "<td>0.640</td>"):
        assert text in row, text
    admin_page = staff_client.get(reverse("admin:activelearn_prmcheckpoint_change", args=[checkpoint.pk]))
    text = admin_page.content.decode()
    assert "best-of-16 on 38 problems (2 skipped)" in text and "random at the prior 0.109" in text
