"""The world every security test starts from: two labelers with one task each, staff, and staff objects."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache

from labeling.labelers import labeler_for_user, labeler_set_status
from labeling.models import (
    Assignment,
    ExportJob,
    Generation,
    LabeledStep,
    Labeler,
    LabelerStatus,
    Problem,
    Solution,
    StepRating,
    Task,
)
from labeling.work.queue import assignment_next
from tests.labeling.admin_factories import make_staff
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task


@pytest.fixture(autouse=True)
def fast_password_hasher(settings: Any) -> None:
    """Six users per test: PBKDF2 would spend most of the suite hashing their passwords."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def empty_cache(request: pytest.FixtureRequest) -> Iterator[None]:
    """Throttle counters must not leak from one test into the next (the cache table outlives transactions)."""
    # pytest-django's own autouse fixture has opened the database for marked tests by now.
    uses_db = request.node.get_closest_marker("django_db") is not None
    if uses_db:
        cache.clear()
    yield
    if uses_db:
        cache.clear()


@dataclass
class World:
    generation: Generation
    a: Labeler
    b: Labeler
    screening: Labeler
    suspended: Labeler
    staff: User
    a_assignment: Assignment
    b_assignment: Assignment
    suspended_assignment: Assignment
    problem: Problem
    solution: Solution
    export: ExportJob


def make_world() -> World:
    g = make_generation()
    tasks = [make_task(generation=g) for _ in range(4)]
    a = make_labeler(name="alice")
    b = make_labeler(name="bob")
    suspended = make_labeler(name="sam")
    # A's and B's ids are adjacent: A's id + 1 is B's assignment, A's id - 1 does not exist or is not A's.
    a_assignment = assignment_next(labeler=a)
    b_assignment = assignment_next(labeler=b)
    suspended_assignment = assignment_next(labeler=suspended)
    assert a_assignment and b_assignment and suspended_assignment
    assert b_assignment.pk == a_assignment.pk + 1
    labeler_set_status(labeler=suspended, status=LabelerStatus.SUSPENDED, reason="test")
    screening = make_labeler(name="sue", status=LabelerStatus.SCREENING)
    staff = make_staff(name="staffer")
    labeler_for_user(user=staff)  # created on the first visit anyway; here so snapshots stay equal
    export = ExportJob.objects.create(requested_by=staff)
    return World(
        generation=g,
        a=a,
        b=b,
        screening=screening,
        suspended=suspended,
        staff=staff,
        a_assignment=a_assignment,
        b_assignment=b_assignment,
        suspended_assignment=suspended_assignment,
        problem=tasks[0].solution.problem,
        solution=tasks[0].solution,
        export=export,
    )


@pytest.fixture
def world(db: None) -> World:
    return make_world()


def snapshot() -> dict[str, Any]:
    """Every row a labeler's request could change, to assert that a refused request changed nothing."""
    return {
        "assignments": sorted(Assignment.objects.values_list()),
        "steps": sorted(LabeledStep.objects.values_list()),
        "ratings": sorted(StepRating.objects.values_list()),
        "tasks": sorted(Task.objects.values_list()),
        "labelers": sorted(Labeler.objects.values_list()),
        "exports": ExportJob.objects.count(),
        "problems": Problem.objects.count(),
        "solutions": Solution.objects.count(),
        "generations": sorted(Generation.objects.values_list()),
        "users": sorted(User.objects.values_list("pk", "is_staff", "is_superuser", "password")),
    }
