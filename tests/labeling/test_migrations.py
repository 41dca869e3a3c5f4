"""Data migrations: what each does to rows that existed before it."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from labeling.models import Labeler


@pytest.mark.django_db(transaction=True)  # migrations run outside the test's transaction
def test_assignments_made_before_0011_get_their_tasks_kind():
    executor = MigrationExecutor(connection)
    before, after = [("labeling", "0010_assignment_state_version")], [("labeling", "0011_assignment_task_kind")]
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        generation = old.get_model("labeling", "Generation").objects.create(number=1)
        problem = old.get_model("labeling", "Problem").objects.create(problem="1 + 1?", answer="2")
        solution = old.get_model("labeling", "Solution").objects.create(problem=problem, steps=["2"])
        Task = old.get_model("labeling", "Task")
        Labeler = old.get_model("labeling", "Labeler")
        Assignment = old.get_model("labeling", "Assignment")
        made = {}
        for serial, (kind, flagged) in enumerate((("normal", False), ("quality_control", True), ("screening", False))):
            task = Task.objects.create(
                generation=generation, solution=solution, kind=kind, is_quality_control=flagged, serial=serial
            )
            made[kind] = Assignment.objects.create(task=task, labeler=Labeler.objects.create(), status="expired").pk

        executor = MigrationExecutor(connection)  # the graph as it is now
        executor.migrate(after)
        new = executor.loader.project_state(after).apps.get_model("labeling", "Assignment")
        assert {kind: new.objects.get(pk=pk).task_kind for kind, pk in made.items()} == {
            "normal": "normal",
            "quality_control": "quality_control",
            "screening": "screening",
        }
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db
def test_the_assignment_table_keeps_its_constraints_and_loses_the_indexes_no_query_needs():
    # 0012 dropped the foreign keys' own indexes and the lease-expiry index;
    # the partial unique index on labeler_id (one lease per labeler) is kept.
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "labeling_assignment")
    unique = [info["columns"] for info in constraints.values() if info["unique"] and not info["primary_key"]]
    assert ["labeler_id"] in unique and ["task_id", "labeler_id"] in unique
    assert constraints["assignment_one_in_progress_per_labeler"]["unique"]
    indexes = {name: info["columns"] for name, info in constraints.items() if info["index"] and not info["unique"]}
    assert "assignment_qc_window_idx" in indexes and "assignment_labeler_status_idx" in indexes
    assert [name for name, columns in indexes.items() if len(columns) == 1] == []
    if connection.vendor == "postgresql":
        # Room for a key press's new row version on its own page (a heap-only tuple).
        with connection.cursor() as cursor:
            cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'labeling_assignment'")
            assert "fillfactor=90" in cursor.fetchone()[0]


@pytest.mark.django_db
def test_a_labeler_made_by_code_older_than_0014_gets_an_empty_qc_window_passed():
    # Between `migrate` and their restart, web processes insert labelers
    # without the new column (labeler_for_user on someone's first visit):
    # the database fills it in instead of refusing them.
    user = get_user_model().objects.create_user(username="from-old-code")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO labeling_labeler (user_id, uuid, status, status_reason, exclude_labels, created_at)"
            " VALUES (%s, %s, 'screening', '', %s, %s)",
            [user.pk, uuid.uuid4().hex, False, timezone.now()],
        )
    assert Labeler.objects.get(user=user).qc_window_passed == ""
