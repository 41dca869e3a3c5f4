"""The screening gate: unscreened labelers get the screening set only, then are admitted or failed."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from django.urls import reverse

from labeling.labelers import labeler_set_status
from labeling.models import Assignment, AssignmentStatus, Labeler, LabelerStatus, LabelerStatusEvent, TaskKind
from labeling.quality.control import labeler_screening_result
from labeling.work.queue import LabelerMayNotWork, assignment_next
from tests.labeling.gold_factories import AGREE, DISAGREE, label, login, make_screening_set, next_for
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def _run_through(labeler: Labeler, patterns: list[list[int]]) -> None:
    for pattern in patterns:
        a = next_for(labeler=labeler)
        assert a is not None and a.task.kind == TaskKind.SCREENING
        label(a, pattern)


def test_it_serves_only_the_screening_set_in_fixed_order_each_once(settings):
    settings.SCREENING_SET_SIZE = 3
    screening = make_screening_set(size=4)
    normal = make_task(generation=make_generation(), priority=100)
    labeler = make_labeler(status=LabelerStatus.SCREENING)
    served = []
    for _ in range(3):
        a = next_for(labeler=labeler)
        served.append(a.task_id)
        assert next_for(labeler=labeler).pk == a.pk  # resumes, never a second item
        label(a, AGREE)
    assert served == [t.pk for t in screening[:3]]
    assert (
        not Assignment.objects.filter(task=normal, labeler=labeler).exists() or labeler.status == LabelerStatus.ACTIVE
    )


def test_it_serves_screening_items_to_every_labeler_whatever_labelers_needed():
    [item] = make_screening_set(size=1)
    for _ in range(3):
        assert next_for(labeler=make_labeler(status=LabelerStatus.SCREENING)).task_id == item.pk


def test_it_admits_a_labeler_at_the_threshold_and_hands_out_normal_work(settings):
    settings.SCREENING_SET_SIZE = 4
    settings.SCREENING_PASS_THRESHOLD = 0.75
    make_screening_set(size=4)
    normal = make_task(generation=make_generation())
    labeler = make_labeler(status=LabelerStatus.SCREENING)
    _run_through(labeler, [AGREE, AGREE, AGREE, DISAGREE])  # 3/4 = 75%
    a = next_for(labeler=labeler)
    assert a.task_id == normal.pk
    labeler.refresh_from_db()
    assert labeler.status == LabelerStatus.ACTIVE
    assert "3 of 4" in labeler.status_reason
    event = LabelerStatusEvent.objects.get(labeler=labeler)
    assert (event.from_status, event.to_status, event.changed_by) == ("screening", "active", None)
    result = labeler_screening_result(labeler=labeler)
    assert (result.finished, result.passed, result.agreement.agreed) == (True, True, 3)


def test_it_fails_a_labeler_below_the_threshold_and_refuses_work(settings):
    settings.SCREENING_SET_SIZE = 4
    make_screening_set(size=4)
    make_task(generation=make_generation())
    labeler = make_labeler(status=LabelerStatus.SCREENING)
    _run_through(labeler, [AGREE, AGREE, DISAGREE, DISAGREE])
    with pytest.raises(LabelerMayNotWork):
        assignment_next(labeler=labeler)
    labeler.refresh_from_db()
    assert labeler.status == LabelerStatus.FAILED_SCREENING
    with pytest.raises(LabelerMayNotWork):
        assignment_next(labeler=labeler)


def test_it_lets_an_admin_override_either_way(settings):
    settings.SCREENING_SET_SIZE = 1
    make_screening_set(size=1)
    normal = make_task(generation=make_generation())
    failed = make_labeler(status=LabelerStatus.SCREENING)
    _run_through(failed, [DISAGREE])
    with pytest.raises(LabelerMayNotWork):
        assignment_next(labeler=failed)
    admin = make_labeler().user
    assert labeler_set_status(labeler=failed, status=LabelerStatus.ACTIVE, reason="reviewed by hand", changed_by=admin)
    assert next_for(labeler=failed).task_id == normal.pk
    assert LabelerStatusEvent.objects.filter(labeler=failed, changed_by=admin, to_status="active").exists()
    # ... and back: the lease is taken away with the status.
    labeler_set_status(labeler=failed, status=LabelerStatus.FAILED_SCREENING, reason="second look", changed_by=admin)
    assert Assignment.objects.get(labeler=failed, task=normal).status == AssignmentStatus.EXPIRED
    with pytest.raises(LabelerMayNotWork):
        assignment_next(labeler=failed)


def test_it_keeps_unscreened_labelers_waiting_without_a_screening_set():
    make_task(generation=make_generation())
    labeler = make_labeler(status=LabelerStatus.SCREENING)
    assert assignment_next(labeler=labeler) is None
    assert labeler.status == LabelerStatus.SCREENING


def test_it_never_lets_an_unscreened_labeler_reach_normal_work_through_the_views(settings):
    settings.SCREENING_SET_SIZE = 2
    make_screening_set(size=2)
    normal = make_task(generation=make_generation(), priority=99)
    other = make_labeler()
    theirs = next_for(labeler=other)
    assert theirs.task_id == normal.pk
    labeler = make_labeler(status=LabelerStatus.SCREENING)
    client = login(labeler)
    response = client.post(reverse("next-task"))
    mine = Assignment.objects.get(labeler=labeler)
    assert mine.task.kind == TaskKind.SCREENING
    assert response["Location"] == reverse("task", args=[mine.pk])
    # Another person's normal assignment is not found, and rating it neither.
    assert client.get(reverse("task", args=[theirs.pk])).status_code == 404
    url = reverse("rate", args=[theirs.pk, 0, 0])
    assert client.post(url, {"set_rating": 1, "flagged": "0", "version": 1}).status_code == 404


def test_it_shows_a_polite_page_after_failing_and_the_result_after_passing(settings):
    settings.SCREENING_SET_SIZE = 1
    make_screening_set(size=1)
    labeler = make_labeler(status=LabelerStatus.SCREENING)
    client = login(labeler)
    client.post(reverse("next-task"))
    a = Assignment.objects.get(labeler=labeler)
    for index, rating in enumerate(DISAGREE):
        client.post(
            reverse("rate", args=[a.pk, index, 0]), {"set_rating": rating, "flagged": "0", "version": index + 1}
        )
    response = client.post(reverse("submit", args=[a.pk]))
    assert response.status_code == 302
    assert response["Location"] == reverse("screening-result")
    page = client.get(reverse("screening-result")).content.decode()
    assert "Thank you" in page and "0 of 1" in page
    assert client.post(reverse("next-task"))["Location"] == reverse("screening-result")
    home = client.get(reverse("home")).content.decode()
    assert reverse("screening-result") in home


def test_it_shows_screening_progress_to_the_labeler(settings):
    settings.SCREENING_SET_SIZE = 3
    make_screening_set(size=3)
    labeler = make_labeler(status=LabelerStatus.SCREENING)
    label(next_for(labeler=labeler), AGREE)
    client = login(labeler)
    page = client.get(reverse("screening-result")).content.decode()
    assert 'data-stat="screening-done">1<' in page and 'data-stat="screening-size">3<' in page


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_it_admits_once_when_two_requests_finish_screening_at_the_same_moment(settings):
    settings.SCREENING_SET_SIZE = 2
    make_screening_set(size=2)
    normal = [make_task(generation=make_generation(), priority=p) for p in (2, 1)]
    labeler = make_labeler(status=LabelerStatus.SCREENING)
    _run_through(labeler, [AGREE, AGREE])
    barrier = threading.Barrier(2)
    results: list[object] = []

    def ask():
        try:
            me = Labeler.objects.get(pk=labeler.pk)  # each request loads its own stale copy: SCREENING
            barrier.wait()
            results.append(assignment_next(labeler=me))
        except BaseException as exc:
            results.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(r, Assignment) for r in results), results
    # One admission, one lease: the second request resumed the first one's task.
    assert LabelerStatusEvent.objects.filter(labeler=labeler).count() == 1
    assert {r.pk for r in results if isinstance(r, Assignment)} == {
        Assignment.objects.get(labeler=labeler, task__in=normal).pk
    }
