"""The database candidate store (labeling.work.candidates.DatabaseCandidateStore), for real."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from activelearn.stepgen import SamplingRecord, StepCandidates
from labeling.models import Assignment, CandidateSetStatus, StepCandidateSet
from labeling.work.candidates import DatabaseCandidateStore
from tests.labeling.work.test_phase_one import make_phase_one_task
from tests.labeling.workflow_factories import make_assignment, make_labeler

pytestmark = pytest.mark.django_db


@pytest.fixture
def assignment() -> Assignment:
    return make_assignment(make_phase_one_task(), labeler=make_labeler())


def candidates(*texts: str) -> dict[str, Any]:
    """save_ready's arguments for what a generator returned."""
    record = SamplingRecord("openai", "math-gen", 4, 1.0, 1.0, 256, None, ("\n",), "{problem}\n\n{steps}")
    details = StepCandidates(texts=texts, sampling=record, samples=4, duplicates=4 - len(texts)).as_dict()
    return {"texts": details.pop("texts"), "sampling": details}


def claim(store: DatabaseCandidateStore, assignment: Assignment, *, now, stale_s: int = 600) -> bool:
    return store.claim(
        assignment_id=assignment.pk, step_index=0, now=now, stale_before=now - timedelta(seconds=stale_s)
    )


def test_a_claim_is_idempotent_while_the_slot_is_pending(assignment):
    store, now = DatabaseCandidateStore(), timezone.now()

    assert claim(store, assignment, now=now) is True
    assert claim(store, assignment, now=now + timedelta(seconds=5)) is False

    assert StepCandidateSet.objects.filter(assignment=assignment).count() == 1
    stored = store.get(assignment_id=assignment.pk, step_index=0)
    assert stored is not None and stored.status == CandidateSetStatus.PENDING


def test_a_stale_pending_claim_may_be_claimed_again(assignment):
    store, now = DatabaseCandidateStore(), timezone.now()
    claim(store, assignment, now=now)

    assert claim(store, assignment, now=now + timedelta(seconds=601)) is True
    row = StepCandidateSet.objects.get(assignment=assignment)
    assert row.updated_at == now + timedelta(seconds=601)


def test_a_ready_slot_is_never_claimed_nor_overwritten(assignment):
    store, now = DatabaseCandidateStore(), timezone.now()
    claim(store, assignment, now=now)
    store.save_ready(assignment_id=assignment.pk, step_index=0, **candidates("A.", "B."), now=now)

    assert claim(store, assignment, now=now + timedelta(days=1)) is False
    store.save_ready(assignment_id=assignment.pk, step_index=0, **candidates("C."), now=now)
    store.save_failed(assignment_id=assignment.pk, step_index=0, error="late", now=now)

    stored = store.get(assignment_id=assignment.pk, step_index=0)
    assert stored is not None
    assert (stored.status, stored.texts, stored.error) == (CandidateSetStatus.READY, ("A.", "B."), "")
    assert stored.sampling["sampling"]["model"] == "math-gen"
    assert stored.sampling["duplicates"] == 2


def test_a_failed_slot_keeps_its_error_and_may_be_claimed_again(assignment):
    store, now = DatabaseCandidateStore(), timezone.now()
    claim(store, assignment, now=now)
    store.save_failed(assignment_id=assignment.pk, step_index=0, error="HTTP 500", now=now)

    stored = store.get(assignment_id=assignment.pk, step_index=0)
    assert stored is not None and (stored.status, stored.error) == (CandidateSetStatus.FAILED, "HTTP 500")
    assert claim(store, assignment, now=now + timedelta(seconds=1)) is True
    row = StepCandidateSet.objects.get(assignment=assignment)
    assert (row.status, row.error) == ("pending", "")


def test_saving_an_unclaimed_slot_creates_it(assignment):
    store, now = DatabaseCandidateStore(), timezone.now()

    store.save_ready(assignment_id=assignment.pk, step_index=3, **candidates("A."), now=now)

    assert store.get(assignment_id=assignment.pk, step_index=3).texts == ("A.",)
    assert store.get(assignment_id=assignment.pk, step_index=0) is None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_claims_of_one_slot_queue_one_task():
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    assignment = make_assignment(make_phase_one_task(), labeler=make_labeler())
    now = timezone.now()

    def one_claim(_: int) -> bool:
        try:
            return claim(DatabaseCandidateStore(), assignment, now=now)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one_claim, range(16)))

    assert results.count(True) == 1
