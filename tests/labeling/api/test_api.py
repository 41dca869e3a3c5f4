"""The REST API: permissions (anonymous, labeler, staff; own vs others'), imports, exports, the task flow."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from labeling.data.exportjobs import export_job_run
from labeling.models import (
    Assignment,
    AssignmentStatus,
    ExportJob,
    ExportJobStatus,
    FinishReason,
    Problem,
    Solution,
    StepRating,
)
from tests.labeling.admin_factories import make_labeled_generation, make_staff
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def _client(user: Any = None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


STAFF_ONLY = [
    ("get", "/api/problems/"),
    ("post", "/api/problems/import/"),
    ("get", "/api/solutions/"),
    ("post", "/api/solutions/import/"),
    ("get", "/api/generations/"),
    ("get", "/api/exports/"),
    ("post", "/api/exports/"),
]


@pytest.mark.parametrize(("method", "url"), STAFF_ONLY)
def test_it_denies_anonymous_callers(method: str, url: str) -> None:
    response = getattr(_client(), method)(url, {}, format="json")
    assert response.status_code in (401, 403)


@pytest.mark.parametrize(("method", "url"), STAFF_ONLY)
def test_it_forbids_labelers_the_staff_endpoints(method: str, url: str) -> None:
    labeler = make_labeler()
    response = getattr(_client(labeler.user), method)(
        url, {"items": [{"unique_id": "x", "problem": "p"}]}, format="json"
    )
    assert response.status_code == 403
    assert not Problem.objects.filter(unique_id="x").exists()
    assert not ExportJob.objects.exists()


def test_it_denies_anonymous_task_flow_and_schema() -> None:
    for method, url in [("post", "/api/tasks/next/"), ("get", "/api/assignments/1/"), ("get", "/api/schema/")]:
        assert getattr(_client(), method)(url).status_code in (401, 403)


def test_it_accepts_token_authentication() -> None:
    staff = make_staff()
    token = Token.objects.create(user=staff)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert client.get("/api/problems/").status_code == 200


def test_it_imports_problems_all_or_nothing_with_the_item_index() -> None:
    client = _client(make_staff())
    good = {"unique_id": "test/algebra/1.json", "problem": "What is $1+1$?", "answer": "2", "level": "Level 2"}
    bad = {"unique_id": "test/algebra/2.json", "problem": "x", "level": "hard"}

    response = client.post("/api/problems/import/", {"items": [good, bad]}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "errors": [{"index": 1, "field": "level", "message": "must be an integer or 'Level N', got 'hard'"}]
    }
    assert not Problem.objects.exists()

    response = client.post("/api/problems/import/", {"items": [good]}, format="json")
    assert response.status_code == 201
    assert response.json()["created"] == {"problems": 1}
    problem = Problem.objects.get()
    assert (problem.level, problem.split) == (2, "test")

    again = client.post("/api/problems/import/", {"items": [good], "dry_run": True}, format="json")
    assert again.status_code == 200
    assert again.json()["skipped"] == 1


def test_it_imports_solution_pools_with_the_same_validation() -> None:
    client = _client(make_staff())
    client.post("/api/problems/import/", {"items": [{"unique_id": "p/1", "problem": "q"}]}, format="json")
    unknown = client.post("/api/solutions/import/", {"items": [{"problem_id": "p/2", "steps": ["a"]}]}, format="json")
    assert unknown.status_code == 400
    assert unknown.json()["errors"][0]["field"] == "problem_id"
    bad = client.post("/api/solutions/import/", {"items": [{"problem_id": "p/1", "steps": ["a", ""]}]}, format="json")
    assert bad.json()["errors"] == [{"index": 0, "field": "steps[1]", "message": "must be a non-empty string"}]
    ok = client.post(
        "/api/solutions/import/",
        {"items": [{"problem_id": "p/1", "steps": "step one\nstep two", "answer": "3", "model": "m"}]},
        format="json",
    )
    assert ok.status_code == 201
    assert Solution.objects.get().steps == ["step one", "step two"]
    listed = client.get("/api/solutions/").json()
    assert listed["results"][0]["problem_unique_id"] == "p/1"


def test_it_lists_and_reads_generations_read_only() -> None:
    generation = make_generation(number=3)
    client = _client(make_staff())
    assert client.get("/api/generations/").json()["results"][0]["number"] == 3
    assert client.get(f"/api/generations/{generation.pk}/").json()["status"] == "open"
    assert client.post("/api/generations/", {}, format="json").status_code == 405
    assert client.delete(f"/api/generations/{generation.pk}/").status_code == 405


def test_it_starts_an_export_after_commit_and_never_runs_it_in_the_request(
    django_capture_on_commit_callbacks: Any, settings: Any, tmp_path: Path
) -> None:
    settings.EXPORT_DIR = tmp_path
    make_labeled_generation(solutions=2)
    client = _client(make_staff())
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/api/exports/", {"format": "stepwise", "neutral": "negative"}, format="json")
    assert response.status_code == 202
    job = ExportJob.objects.get()
    assert job.status == ExportJobStatus.QUEUED
    assert len(callbacks) == 1
    assert list(tmp_path.iterdir()) == []

    assert client.get(f"/api/exports/{job.pk}/download/").status_code == 404
    export_job_run(job_id=job.pk)  # what the worker does (a worker test runs it for real)
    status = client.get(f"/api/exports/{job.pk}/").json()
    assert status["status"] == "done"
    assert status["records"] == 2
    assert status["percent"] == 100
    download = client.get(f"/api/exports/{job.pk}/download/")
    assert download.status_code == 200
    lines = b"".join(download.streaming_content).decode().splitlines()
    assert len(lines) == 2
    assert '"labels":[true,false,true,true,true]' in lines[0]


def test_it_refuses_parquet_without_pyarrow() -> None:
    from labeling.data.stepwise import parquet_available

    if parquet_available():
        pytest.skip("pyarrow is installed")
    response = _client(make_staff()).post("/api/exports/", {"format": "parquet"}, format="json")
    assert response.status_code == 400
    assert not ExportJob.objects.exists()


# --- The labeler's task flow ---------------------------------------------------


def test_it_runs_the_task_flow_for_a_labeler() -> None:
    task = make_task(generation=make_generation(), steps=["a", "b"])
    labeler = make_labeler()
    client = _client(labeler.user)

    response = client.post("/api/tasks/next/")
    assert response.status_code == 200
    body = response.json()
    assignment_id = body["id"]
    assert body["step_count"] == 2
    assert Assignment.objects.get(pk=assignment_id).task == task

    for step, version in [(0, 1), (1, 2)]:
        rated = client.post(
            f"/api/assignments/{assignment_id}/ratings/",
            {"step": step, "completion": 0, "rating": 1, "flagged": False, "version": version},
            format="json",
        )
        assert rated.status_code == 200, rated.json()
        assert rated.json()["applied"] is True
    stale = client.post(
        f"/api/assignments/{assignment_id}/ratings/", {"step": 1, "rating": -1, "version": 1}, format="json"
    )
    assert stale.json()["applied"] is False

    submitted = client.post(f"/api/assignments/{assignment_id}/submit/")
    assert submitted.status_code == 200
    assert submitted.json()["finish_reason"] == FinishReason.SOLUTION
    assert client.post("/api/tasks/next/").status_code == 204


def test_it_gives_up_with_a_reason_only() -> None:
    make_task(generation=make_generation())
    labeler = make_labeler()
    client = _client(labeler.user)
    assignment_id = client.post("/api/tasks/next/").json()["id"]
    assert client.post(f"/api/assignments/{assignment_id}/give-up/", {"reason": ""}, format="json").status_code == 400
    done = client.post(f"/api/assignments/{assignment_id}/bad-problem/", {"reason": "typo in it"}, format="json")
    assert done.status_code == 200
    assignment = Assignment.objects.get(pk=assignment_id)
    assert (assignment.status, assignment.finish_reason) == (AssignmentStatus.SUBMITTED, FinishReason.BAD_PROBLEM)


def test_it_hides_another_labelers_assignment_and_leaves_it_unchanged() -> None:
    make_task(generation=make_generation())
    owner, other = make_labeler(), make_labeler()
    assignment_id = _client(owner.user).post("/api/tasks/next/").json()["id"]
    intruder = _client(other.user)
    for method, suffix, data in [
        ("get", "", None),
        ("post", "ratings/", {"step": 0, "rating": -1, "version": 5}),
        ("post", "submit/", None),
        ("post", "give-up/", {"reason": "x"}),
        ("post", "bad-problem/", {"reason": "x"}),
    ]:
        response = getattr(intruder, method)(f"/api/assignments/{assignment_id}/{suffix}", data, format="json")
        assert response.status_code == 404
    assignment = Assignment.objects.get(pk=assignment_id)
    assert assignment.status == AssignmentStatus.IN_PROGRESS
    assert not StepRating.objects.exists()


def test_it_refuses_work_to_a_suspended_labeler() -> None:
    make_task(generation=make_generation())
    labeler = make_labeler(status="suspended")
    response = _client(labeler.user).post("/api/tasks/next/")
    assert response.status_code == 403
    assert not Assignment.objects.exists()


def test_it_rejects_a_rating_out_of_range() -> None:
    make_task(generation=make_generation())
    labeler = make_labeler()
    client = _client(labeler.user)
    assignment_id = client.post("/api/tasks/next/").json()["id"]
    response = client.post(
        f"/api/assignments/{assignment_id}/ratings/", {"step": 0, "rating": 2, "version": 1}, format="json"
    )
    assert response.status_code == 400
    ahead = client.post(
        f"/api/assignments/{assignment_id}/ratings/", {"step": 3, "rating": 1, "version": 1}, format="json"
    )
    assert ahead.status_code == 409


def test_it_serves_an_openapi_schema_that_validates() -> None:
    out = StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    assert "/api/tasks/next/" in out.getvalue()


def test_it_renders_the_api_docs_page_without_a_cdn() -> None:
    from django.test import Client

    client = Client()
    client.force_login(make_staff())
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/api/assignments/{id}/ratings/" in html
    # Nothing is loaded from another host (a random CSRF token may contain "cdn").
    assert not re.search(r"""(?:src|href)=["'](?:https?:)?//""", html)
    assert client.get("/api/schema/").status_code == 200
