"""The research admin: who may see it, list pages with pinned query counts, gold editing, labeler actions."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse

from activelearn.models import CheckpointStatus, PRMCheckpoint, SolutionScore
from labeling.models import (
    Assignment,
    AssignmentStatus,
    ExportJob,
    FinishReason,
    GoldStep,
    Labeler,
    LabelerStatus,
    Problem,
)
from labeling.staff.admin_base import EstimatedCountPaginator
from tests.labeling.admin_factories import make_staff, make_submitted
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def _user(labeler: Labeler) -> User:
    assert labeler.user is not None
    return labeler.user


LISTS = [
    "admin:labeling_problem_changelist",
    "admin:labeling_solution_changelist",
    "admin:labeling_task_changelist",
    "admin:labeling_assignment_changelist",
    "admin:labeling_labeler_changelist",
    "admin:labeling_generation_changelist",
    "admin:labeling_exportjob_changelist",
    "admin:activelearn_prmcheckpoint_changelist",
    "admin:activelearn_solutionscore_changelist",
]


@pytest.fixture
def staff_client() -> Client:
    client = Client()
    client.force_login(make_staff())
    return client


def _many_rows(n: int) -> None:
    generation = make_generation(number=0)
    labelers = [make_labeler() for _ in range(3)]
    checkpoint = PRMCheckpoint.objects.create(base_model="tiny", status=CheckpointStatus.TRAINING)
    for i in range(n):
        task = make_task(generation=generation)
        make_submitted(task=task, labeler=labelers[i % 3], ratings=[1, 1, -1], flagged_steps=frozenset({0}))
        SolutionScore.objects.create(solution=task.solution, checkpoint=checkpoint, score=0.5, step_scores=[0.9, 0.5])
    ExportJob.objects.create()


@pytest.mark.parametrize("name", LISTS)
def test_it_sends_anonymous_visitors_to_the_login_page(name: str) -> None:
    response = Client().get(reverse(name))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


@pytest.mark.parametrize("name", LISTS)
def test_it_keeps_labelers_out(name: str) -> None:
    client = Client()
    client.force_login(_user(make_labeler()))
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


@pytest.mark.parametrize("name", LISTS)
def test_it_lists_many_rows_in_a_fixed_number_of_queries(
    name: str, staff_client: Client, django_assert_max_num_queries: Any
) -> None:
    _many_rows(60)
    # Session, user, the page's rows (joined), its count, and the filters'
    # choices: the same number whether the page shows 6 rows or 50.
    with django_assert_max_num_queries(12):
        response = staff_client.get(reverse(name))
    assert response.status_code == 200


def test_it_shows_labeler_work_statistics(staff_client: Client) -> None:
    generation = make_generation(number=0)
    labeler = make_labeler()
    make_submitted(task=make_task(generation=generation), labeler=labeler, ratings=[1, 1, 1, 1], total_time_ms=40_000)
    make_submitted(
        task=make_task(generation=generation),
        labeler=labeler,
        ratings=[1, 1],
        finish_reason="give_up",
        total_time_ms=20_000,
        flagged_steps=frozenset({1}),
    )
    page = staff_client.get(reverse("admin:labeling_labeler_change", args=[labeler.pk])).content.decode()
    # 6 step labels in 60 s: 360 per hour; medians 10 s and 10 s per step.
    assert "360" in page
    assert "10.0" in page
    assert "16.7 %" in page  # 1 flagged of 6
    assert "50.0 %" in page  # 1 give-up of 2


def test_it_suspends_and_reinstates_through_the_status_service(staff_client: Client) -> None:
    labeler = make_labeler()
    url = reverse("admin:labeling_labeler_changelist")
    confirm = staff_client.post(url, {"action": "suspend", ACTION_CHECKBOX_NAME: [labeler.pk]})
    assert confirm.status_code == 200
    assert b"reason" in confirm.content
    labeler.refresh_from_db()
    assert labeler.status == LabelerStatus.ACTIVE  # nothing happens before a reason is given

    done = staff_client.post(
        url, {"action": "suspend", ACTION_CHECKBOX_NAME: [labeler.pk], "apply": "1", "reason": "copied answers"}
    )
    assert done.status_code == 302
    labeler.refresh_from_db()
    assert (labeler.status, labeler.status_reason) == (LabelerStatus.SUSPENDED, "copied answers")
    assert labeler.status_events.get().changed_by.username == "research"

    staff_client.post(url, {"action": "reinstate", ACTION_CHECKBOX_NAME: [labeler.pk], "apply": "1", "reason": "ok"})
    labeler.refresh_from_db()
    assert labeler.status == LabelerStatus.ACTIVE


def test_it_changes_only_exclude_labels_on_the_labeler_form(staff_client: Client) -> None:
    labeler = make_labeler(status=LabelerStatus.SUSPENDED)
    url = reverse("admin:labeling_labeler_change", args=[labeler.pk])
    staff_client.post(url, {"exclude_labels": "on", "status": "active"})
    labeler.refresh_from_db()
    assert labeler.exclude_labels is True
    assert labeler.status == LabelerStatus.SUSPENDED


def test_it_shows_solution_steps_for_katex_and_the_latest_scores(staff_client: Client) -> None:
    task = make_task(generation=make_generation(number=0))
    old = PRMCheckpoint.objects.create(base_model="tiny", status=CheckpointStatus.FAILED)
    new = PRMCheckpoint.objects.create(base_model="tiny", status=CheckpointStatus.TRAINING)
    SolutionScore.objects.create(solution=task.solution, checkpoint=old, score=0.1, step_scores=[0.1])
    SolutionScore.objects.create(solution=task.solution, checkpoint=new, score=0.75, step_scores=[0.9, 0.8])
    page = staff_client.get(reverse("admin:labeling_solution_change", args=[task.solution.pk])).content.decode()
    assert '<ol class="math solution-steps">' in page
    assert "$3x-7$" in page
    assert "vendor/katex/katex.min.js" in page
    assert f"0.750 (product, checkpoint #{new.pk})" in page
    assert "1: 0.900, 2: 0.800" in page


def test_a_solution_page_numbers_each_step_once_and_shows_the_reference_answer(staff_client: Client) -> None:
    import re

    steps = ["1. We have $x = 2$.", "2. So $x^2 = 4$.", "Hence 4.", "4 is the answer."]
    task = make_task(generation=make_generation(number=0), steps=steps, answer="seven apples")

    page = staff_client.get(reverse("admin:labeling_solution_change", args=[task.solution.pk])).content.decode()

    labels = re.findall(r"<label>([^<]*):</label>", page)
    assert labels.count("Problem") == 1 and "Problem statement" in labels
    # The steps that number themselves get no second number; the others keep the list's.
    items = re.findall(r"<li value='(\d+)'( style='list-style: none')?>", page)
    assert items == [("1", " style='list-style: none'"), ("2", " style='list-style: none'"), ("3", ""), ("4", "")]
    assert "Reference answer" in labels
    assert "<bdi>seven apples</bdi>" in page  # one click less: the answer is on the page


def test_it_edits_gold_for_one_solution_on_one_screen(staff_client: Client) -> None:
    solution = make_task(generation=make_generation(number=0), steps=["a", "b", "c"]).solution
    url = reverse("admin:labeling_solution_gold", args=[solution.pk])
    page = staff_client.get(url)
    assert page.status_code == 200
    assert page.content.count(b'type="checkbox"') == 9

    form = {
        "step-0-neutral_ok": "on",
        "step-0-positive_ok": "on",
        "step-1-negative_ok": "on",
        "step-1-note": "sign error",
        "step-2-neutral_ok": "on",
    }
    assert staff_client.post(url, form).status_code == 302
    rows = list(
        GoldStep.objects.filter(solution=solution).values_list(
            "step_index", "negative_ok", "neutral_ok", "positive_ok", "note"
        )
    )
    assert rows == [(0, False, True, True, ""), (1, True, False, False, "sign error"), (2, False, True, False, "")]


def test_it_refuses_gold_that_allows_no_rating(staff_client: Client) -> None:
    solution = make_task(generation=make_generation(number=0), steps=["a", "b"]).solution
    url = reverse("admin:labeling_solution_gold", args=[solution.pk])
    response = staff_client.post(url, {"step-0-neutral_ok": "on"}, follow=True)
    assert b"must allow some rating" in response.content
    assert not GoldStep.objects.exists()


def test_it_keeps_labelers_out_of_the_gold_editor() -> None:
    solution = make_task(generation=make_generation(number=0)).solution
    client = Client()
    client.force_login(_user(make_labeler()))
    response = client.post(reverse("admin:labeling_solution_gold", args=[solution.pk]), {"step-0-negative_ok": "on"})
    assert response.status_code == 302
    assert not GoldStep.objects.exists()


def test_it_shows_an_assignments_labels_read_only(staff_client: Client) -> None:
    task = make_task(generation=make_generation(number=0), alternatives={1: ["other step"]})
    assignment = make_submitted(
        task=task, labeler=make_labeler(), ratings=[1, -1], alternatives_at_last=[("other step", 1)]
    )
    page = staff_client.get(reverse("admin:labeling_assignment_change", args=[assignment.pk])).content.decode()
    assert "own step" in page
    assert "alt 1" in page
    assert "other step" in page
    assert 'name="_save"' not in page
    assert staff_client.post(reverse("admin:labeling_assignment_change", args=[assignment.pk]), {}).status_code == 403
    assert Assignment.objects.get().status == AssignmentStatus.SUBMITTED


def test_it_shows_a_generation_read_only_without_pipeline_actions(staff_client: Client) -> None:
    generation = make_generation(number=4)
    page = staff_client.get(reverse("admin:labeling_generation_change", args=[generation.pk])).content.decode()
    assert "generation 4" in page
    assert 'name="_save"' not in page
    assert staff_client.get(reverse("admin:labeling_generation_add")).status_code == 403


def test_it_searches_problems_by_unique_id_and_text(staff_client: Client) -> None:
    make_task(generation=make_generation(number=0))
    problem = Problem.objects.get()
    url = reverse("admin:labeling_problem_changelist")
    assert problem.unique_id in staff_client.get(url, {"q": problem.unique_id[:6]}).content.decode()
    assert problem.unique_id in staff_client.get(url, {"q": "denominator"}).content.decode()
    assert problem.unique_id not in staff_client.get(url, {"q": "zzz-nothing"}).content.decode()


@pytest.mark.postgres
def test_it_estimates_unfiltered_counts_on_postgresql() -> None:
    with connection.cursor() as cursor:
        # What ANALYZE would store for a large table; the estimate is read, not counted.
        cursor.execute("UPDATE pg_class SET reltuples = 2500000 WHERE oid = to_regclass('labeling_labeler')")
    try:
        assert EstimatedCountPaginator(Labeler.objects.all(), 50).count == 2_500_000
        assert EstimatedCountPaginator(Labeler.objects.filter(status="active"), 50).count == 0
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE labeling_labeler")


def test_it_counts_exactly_where_no_estimate_applies() -> None:
    make_labeler()
    assert EstimatedCountPaginator(Labeler.objects.all(), 50).count == 1


def test_the_admin_shows_problem_steps_and_labeler_text_bidi_isolated_with_hidden_characters_visible(
    staff_client: Client,
) -> None:
    task = make_task(generation=make_generation(), steps=["\u202eevil", "zero\u200bwidth"])
    assignment = make_submitted(task=task, labeler=make_labeler(), ratings=[1, 1], finish_reason=FinishReason.GIVE_UP)
    Assignment.objects.filter(pk=assignment.pk).update(finish_reason_text="too hard\u2067!")
    body = staff_client.get(reverse("admin:labeling_assignment_change", args=[assignment.pk])).content.decode()
    solution = staff_client.get(reverse("admin:labeling_solution_change", args=[task.solution_id])).content.decode()
    for page in (body, solution):
        assert "\u202e" not in page and "\u200b" not in page
        assert '<bdi><span class="ctl" title="RIGHT-TO-LEFT OVERRIDE">\u27e8U+202E\u27e9</span>evil</bdi>' in page
    assert "\u27e8U+200B\u27e9" in body and "\u27e8U+2067\u27e9" in body
