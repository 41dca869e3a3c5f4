"""A hand-out's reads of a labeler's history cost the same after ten assignments or ten thousand.

Every hand-out reads the labeler's current lease (hotpath.LABELER_LOCK) and
their rolling QC window (labeling.quality.control.ROLLING_WINDOW_IDS), and
one in ten looks for the QC items they have not seen
(hotpath.QUALITY_CONTROL_UNSEEN). Both
are prepared statements, which PostgreSQL may run with a generic plan, one
that does not know the values. Each is served by a partial index that only a
condition written into the statement can match: with the status or the kind
passed as a value, the generic plan read every assignment the labeler ever
had. Each assignment carries its task's kind so that the window's index can
hold only QC items.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from labeling.models import Assignment, AssignmentStatus, LabelerStatus, Task, TaskKind
from labeling.quality.control import ROLLING_WINDOW_IDS, WINDOW_GOLD, WINDOW_ITEMS, WINDOW_RATINGS
from labeling.work.hotpath import (
    LABELER_LOCK,
    QUALITY_CONTROL_UNSEEN,
    TASK_CANDIDATE,
    quality_control_unseen_ids,
    task_candidate_params,
)
from labeling.work.queue import assignment_next
from tests.labeling.gold_factories import make_qc_pool, make_screening_set
from tests.labeling.workflow_factories import FixedDraw, make_assignment, make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def test_every_assignment_carries_its_tasks_kind_however_it_was_made():
    g = make_generation()
    pool = make_qc_pool(generation=g, size=1)
    make_task(generation=g)
    make_task(generation=g)
    qc = assignment_next(labeler=make_labeler(), rng=FixedDraw(0.0))  # the QC draw comes up
    normal = assignment_next(labeler=make_labeler(), rng=FixedDraw(0.99))
    screening_set = make_screening_set(size=1)
    screened = assignment_next(labeler=make_labeler(status=LabelerStatus.SCREENING))
    assert qc is not None and normal is not None and screened is not None
    made_by_hand = make_assignment(pool[0], labeler=make_labeler(), status=AssignmentStatus.EXPIRED)
    loaded_task = make_assignment(Task.objects.get(pk=pool[0].pk), labeler=make_labeler())

    kinds = {a.pk: a.task_kind for a in (qc, normal, screened, made_by_hand, loaded_task)}
    assert kinds == {
        qc.pk: TaskKind.QUALITY_CONTROL,
        normal.pk: TaskKind.NORMAL,
        screened.pk: TaskKind.SCREENING,
        made_by_hand.pk: TaskKind.QUALITY_CONTROL,
        loaded_task.pk: TaskKind.QUALITY_CONTROL,
    }
    assert screened.task_id == screening_set[0].pk
    assert not Assignment.objects.exclude(task_kind=F("task__kind")).exists()  # as stored, too


def test_an_assignment_made_without_its_tasks_kind_is_refused():
    task = make_task(generation=make_generation())
    with pytest.raises(IntegrityError), transaction.atomic():
        Assignment.objects.create(task=task, labeler=make_labeler())
    assert not Assignment.objects.exists()


def test_saving_an_assignment_read_in_part_writes_it_and_reads_nothing(django_assert_num_queries):
    # What the phase-1 services do with hotpath's locking read: its task_kind
    # is deferred, and a save of other fields must not go and read it.
    from labeling.work.hotpath import assignment_locked

    make_task(generation=make_generation())
    a = assignment_next(labeler=make_labeler())
    assert a is not None
    with transaction.atomic():
        locked = assignment_locked(assignment_id=a.pk, user_id=None, task_lock=False)
        assert locked is not None and "task_kind" in locked.get_deferred_fields()
        locked.lease_expires_at = timezone.now()
        with django_assert_num_queries(1):
            locked.save(update_fields=["lease_expires_at"])
    a.refresh_from_db()
    assert a.task_kind == TaskKind.NORMAL


def _generic_plan(statement: str, values: list[object]) -> str:
    # The plan PostgreSQL keeps for a prepared statement once it stops
    # planning per value; sequential scans priced out, so that the answer is
    # which index the statement can use, not what this small database favours.
    numbered = iter(range(1, len(values) + 1))
    text = re.sub(r"%s", lambda _m: f"${next(numbered)}", statement)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"PREPARE hot_plan AS {text}")
        try:
            cursor.execute("EXPLAIN EXECUTE hot_plan(" + ", ".join(["%s"] * len(values)) + ")", values)
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE hot_plan")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plans of PostgreSQL's prepared statements")
def test_the_lease_and_the_qc_window_are_read_through_their_partial_indexes_in_the_generic_plan():
    g = make_generation()
    labeler = make_labeler()
    for _ in range(3):
        a = make_assignment(make_task(generation=g), labeler=labeler, started_at=timezone.now())
        Assignment.objects.filter(pk=a.pk).update(status=AssignmentStatus.EXPIRED)
    lease = _generic_plan(LABELER_LOCK.format(lock=" FOR NO KEY UPDATE OF l"), [labeler.pk])
    assert "assignment_one_in_progress_per_labeler" in lease, lease
    window = _generic_plan(ROLLING_WINDOW_IDS.format(since=" AND a.started_at > %s"), [labeler.pk, timezone.now(), 20])
    assert "assignment_qc_window_idx" in window and "Sort" not in window, window


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plans of PostgreSQL's prepared statements")
def test_the_unseen_qc_items_are_found_through_the_qc_pools_index_in_the_generic_plan():
    # From the pool (task_gold_kind_idx), not from every gold step of every
    # screening and QC solution there is.
    g = make_generation()
    make_qc_pool(generation=g, size=2)
    make_screening_set(size=2)
    labeler = make_labeler()
    plan = _generic_plan(QUALITY_CONTROL_UNSEEN, [labeler.pk])
    assert "task_gold_kind_idx" in plan, plan
    assert sorted(quality_control_unseen_ids(labeler_id=labeler.pk)) == sorted(
        Task.objects.filter(generation=g, kind=TaskKind.QUALITY_CONTROL).values_list("pk", flat=True)
    )


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plans of PostgreSQL's prepared statements")
def test_a_windows_items_and_gold_are_reached_from_its_assignment_ids():
    # labeling.quality.control.window_quality: the window's assignments by
    # primary key, their tasks from them (id = a.task_id), the gold by the
    # solutions found there. An earlier form joined the gold to the tasks
    # directly, and on the load benchmark's database PostgreSQL merged the
    # gold steps with the whole task table in solution order (50 ms). A
    # database this small does not bring that plan out; the subquery's shape
    # is what rules it out, and this pins the access paths it leads to.
    g = make_generation()
    pool = make_qc_pool(generation=g, size=3)
    for _ in range(3):
        make_task(generation=g)
    ids = [make_assignment(task, labeler=make_labeler()).pk for task in pool]
    placeholders = ", ".join(["%s"] * len(ids))
    for statement in (WINDOW_ITEMS, WINDOW_GOLD):
        plan = _generic_plan(statement.format(ids=placeholders), ids)
        assert "labeling_assignment_pkey" in plan and "labeling_task_pkey" in plan, plan
        assert "(id = a.task_id)" in plan and "labeling_task_solution_id" not in plan, plan
    gold = _generic_plan(WINDOW_GOLD.format(ids=placeholders), ids)
    assert "(solution_id = t.solution_id)" in gold, gold
    ratings = _generic_plan(WINDOW_RATINGS.format(ids=placeholders), ids)
    assert "labeling_labeledstep_assignment_id" in ratings or "labeled_step_unique_index" in ratings, ratings


def _subplans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for child in node.get("Plans", []):
        if "Subplan Name" in child:
            yield child
        yield from _subplans(child)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plans of PostgreSQL")
def test_the_next_task_search_passes_over_the_tasks_being_labeled_without_counting_their_places():
    # The front of the queue is the tasks other labelers hold right now; each
    # search steps over them. One-place tasks with a live lease are passed over
    # from one read of the live leases: the places of the task found, alone,
    # are counted, however many labelers are at work.
    g = make_generation()
    held = [make_task(generation=g, priority=10.0 - i) for i in range(6)]
    lapsed = make_task(generation=g, priority=3.0)
    shared = make_task(generation=g, priority=2.0, labelers_needed=2)
    now = timezone.now()
    for task in held:
        make_assignment(task, labeler=make_labeler(), lease_expires_at=now + timedelta(minutes=30))
    make_assignment(lapsed, labeler=make_labeler(), lease_expires_at=now - timedelta(minutes=1))
    make_assignment(shared, labeler=make_labeler(), lease_expires_at=now + timedelta(minutes=30))
    me = make_labeler()
    sql = TASK_CANDIDATE.format(tried="", lock=" FOR UPDATE OF t SKIP LOCKED")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # as on a queue of any size: the ordered index
        params = task_candidate_params(generation_id=g.pk, labeler_id=me.pk, at=now)
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0][0]["Plan"]
        cursor.execute(sql, params)
        found = cursor.fetchone()
    assert found is not None and found[0] == lapsed.pk  # a lapsed lease holds no place
    loops = {node["Subplan Name"]: node["Actual Loops"] for node in _subplans(plan)}
    hashed = set(re.findall(r"hashed (SubPlan \d+)", json.dumps(plan)))
    assert len(hashed) == 1, plan  # the live leases, read once
    counted = [n for name, n in loops.items() if name not in hashed]
    assert counted and max(counted) == 1, loops  # the lapsed task's places, not the six held ones'

    # A second place on a task someone holds is still found, after the lapsed one.
    past_lapsed = task_candidate_params(generation_id=g.pk, labeler_id=me.pk, at=now, tried=[lapsed.pk])
    with connection.cursor() as cursor:
        cursor.execute(TASK_CANDIDATE.format(tried=" AND t.id NOT IN (%s)", lock=""), past_lapsed)
        assert cursor.fetchone()[0] == shared.pk
