"""Data migrations: what each does to rows that existed before it."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


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
