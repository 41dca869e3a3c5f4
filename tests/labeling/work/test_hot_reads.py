"""The written-out reads of every hand-out: each returns what its ORM form did (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from labeling.labelers import labeler_for_user
from labeling.models import Assignment, AssignmentStatus, Generation, GenerationStatus, Labeler, Phase, Task
from labeling.quality.control import _finished_gold_assignments, _rolling_window_ids
from labeling.work.hotpath import open_generation_ids
from tests.labeling.gold_factories import make_qc_pool, make_screening_set
from tests.labeling.workflow_factories import make_assignment, make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def test_the_request_labeler_is_the_stored_row_with_every_field_as_the_orm_reads_it():
    labeler = make_labeler()
    changed = timezone.now() - timedelta(days=2, microseconds=17)
    Labeler.objects.filter(pk=labeler.pk).update(
        status_reason="Reinstated: ✓ by an admin", status_changed_at=changed, exclude_labels=True
    )
    assert labeler.user_id is not None
    user = User.objects.get(pk=labeler.user_id)
    read = labeler_for_user(user=user)
    stored = Labeler.objects.get(pk=labeler.pk)
    for field in Labeler._meta.concrete_fields:
        assert getattr(read, field.attname) == getattr(stored, field.attname), field.name
    assert isinstance(read.uuid, uuid.UUID)
    assert read.status_changed_at == changed and timezone.is_aware(read.status_changed_at)
    assert user.labeler is read  # kept for the request: a second call reads nothing
    read.status_reason = "saved"
    read.save(update_fields=["status_reason"])  # a full model instance, not a partial one
    assert Labeler.objects.get(pk=labeler.pk).status_reason == "saved"


def test_a_user_without_a_labeler_row_gets_one_once():
    user = User.objects.create_user(username="first-visit", password="pw-for-tests-1")
    made = labeler_for_user(user=user)
    again = labeler_for_user(user=User.objects.get(pk=user.pk))
    assert made.pk == again.pk and Labeler.objects.filter(user=user).count() == 1


def _assignment(task: Task, labeler: Labeler, *, status: str, started_at: datetime) -> Assignment:
    finished = status != AssignmentStatus.IN_PROGRESS
    return make_assignment(
        task, labeler=labeler, status=status, started_at=started_at,
        finish_reason="give_up" if finished else None, submitted_at=started_at if finished else None,
    )  # fmt: skip


def test_the_qc_window_is_the_last_finished_qc_items_since_the_status_changed(settings):
    settings.QC_WINDOW = 4
    g = make_generation()
    qc = make_qc_pool(generation=g, size=9)
    screening = make_screening_set(size=2)
    normal = make_task(generation=g)
    labeler, other = make_labeler(), make_labeler()
    now = timezone.now()
    statuses = [AssignmentStatus.SUBMITTED, AssignmentStatus.EXPIRED, AssignmentStatus.SUBMITTED]
    # Items 0-1 started before the status change, 2-7 after; 8 is in progress.
    for i, task in enumerate(qc[:8]):
        _assignment(task, labeler, status=statuses[i % 3], started_at=now - timedelta(hours=10 - i))
    _assignment(qc[8], labeler, status=AssignmentStatus.IN_PROGRESS, started_at=now)
    for task in screening:  # gold, but not QC
        _assignment(task, labeler, status=AssignmentStatus.SUBMITTED, started_at=now - timedelta(minutes=5))
    _assignment(normal, labeler, status=AssignmentStatus.SUBMITTED, started_at=now - timedelta(minutes=1))
    _assignment(qc[7], other, status=AssignmentStatus.SUBMITTED, started_at=now)  # someone else's
    Labeler.objects.filter(pk=labeler.pk).update(status_changed_at=now - timedelta(hours=8, minutes=30))
    labeler.refresh_from_db()

    def orm(labeler: Labeler) -> list[int]:
        qs = _finished_gold_assignments().filter(labeler=labeler, task__kind="quality_control")
        if labeler.status_changed_at is not None:
            qs = qs.filter(started_at__gt=labeler.status_changed_at)
        return list(qs.order_by("-started_at", "-pk").values_list("pk", flat=True)[: settings.QC_WINDOW])

    mine = Assignment.objects.filter(labeler=labeler)
    settings.QC_WINDOW = 50
    assert _rolling_window_ids(labeler=labeler) == [mine.get(task=qc[i]).pk for i in range(7, 1, -1)]
    assert _rolling_window_ids(labeler=labeler) == orm(labeler)
    settings.QC_WINDOW = 4
    window = _rolling_window_ids(labeler=labeler)
    assert window == [mine.get(task=qc[i]).pk for i in (7, 6, 5, 4)]  # newest first, cut at QC_WINDOW
    assert window == orm(labeler)
    labeler.status_changed_at = None  # never changed: the whole history counts
    settings.QC_WINDOW = 50
    assert _rolling_window_ids(labeler=labeler) == [mine.get(task=qc[i]).pk for i in range(7, -1, -1)]
    assert _rolling_window_ids(labeler=labeler) == orm(labeler)


def test_open_generations_are_the_open_phase_one_and_two_ones_in_number_order():
    later = make_generation(number=7)
    earlier = make_generation(number=3)
    make_generation(number=5, status=GenerationStatus.CLOSED)
    Generation.objects.filter(pk=later.pk).update(phase=Phase.TWO)
    ids = open_generation_ids()
    orm = list(
        Generation.objects.filter(status=GenerationStatus.OPEN, phase__in=[Phase.ONE, Phase.TWO])
        .order_by("number")
        .values_list("pk", flat=True)
    )
    assert ids == orm
    assert ids.index(earlier.pk) < ids.index(later.pk)


def test_the_unseen_qc_items_are_the_gold_qc_tasks_of_open_phase_two_generations_the_labeler_has_not_had():
    from labeling.models import GoldStep, TaskKind, TaskStatus
    from labeling.work.hotpath import quality_control_unseen_ids

    current = make_generation()
    Generation.objects.filter(pk=current.pk).update(phase=Phase.TWO)
    pool = make_qc_pool(generation=current, size=5)
    closed = make_generation(status=GenerationStatus.CLOSED)
    Generation.objects.filter(pk=closed.pk).update(phase=Phase.TWO)
    elsewhere = make_qc_pool(generation=closed, size=1)  # a closed generation's pool
    phase_one = make_qc_pool(generation=make_generation(), size=1)  # a phase-1 generation's pool
    Generation.objects.filter(pk=phase_one[0].generation_id).update(phase=Phase.ONE)
    done, retired, no_gold, had = pool[1], pool[2], pool[3], pool[4]
    Task.objects.filter(pk=done.pk).update(status=TaskStatus.DONE)  # still served: QC goes to everyone
    Task.objects.filter(pk=retired.pk).update(status=TaskStatus.RETIRED)
    GoldStep.objects.filter(solution_id=no_gold.solution_id).delete()
    labeler, other = make_labeler(), make_labeler()
    make_assignment(had, labeler=labeler, status=AssignmentStatus.EXPIRED)  # had, even if lost
    make_assignment(pool[0], labeler=other, status=AssignmentStatus.EXPIRED)
    make_task(generation=current)  # normal work is never a QC item

    assert quality_control_unseen_ids(labeler_id=labeler.pk) == sorted([pool[0].pk, done.pk])
    assert quality_control_unseen_ids(labeler_id=other.pk) == sorted([done.pk, had.pk])
    assert elsewhere[0].kind == TaskKind.QUALITY_CONTROL and phase_one[0].kind == TaskKind.QUALITY_CONTROL
