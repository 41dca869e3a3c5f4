"""Continuous QC: serving rate, once per labeler, rolling quality, suspension, IAA, export flags."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from labeling.data.exports import iter_prm800k_records
from labeling.labelers import labeler_set_status
from labeling.models import (
    Assignment,
    AssignmentStatus,
    LabeledStep,
    Labeler,
    LabelerStatus,
    Solution,
    StepRating,
    Task,
    TaskKind,
)
from labeling.quality.control import (
    generation_gold_agreement,
    generation_inter_annotator_agreement,
    generation_inter_annotator_agreement_by_pair,
    gold_outcomes,
    labeler_gold_agreement,
    labeler_quality_enforce,
    labeler_rolling_quality,
    overlap_labelers_needed,
    summarise,
    window_quality,
)
from labeling.quality.gold import gold_set, gold_steps_for_errors
from labeling.work.queue import LabelerMayNotWork, assignment_next, assignment_next_in_transaction
from labeling.work.rating import step_rate
from tests.labeling.gold_factories import AGREE, DISAGREE, label, make_qc_pool, make_screening_set, next_for
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

pytestmark = pytest.mark.django_db


def _finish(a: Assignment) -> None:
    Assignment.objects.filter(pk=a.pk).update(
        status=AssignmentStatus.SUBMITTED, finish_reason="give_up", submitted_at=timezone.now()
    )


def test_it_serves_qc_items_at_the_configured_rate(settings):
    settings.QC_RATE = 0.25
    settings.QC_ITEMS_MAX = 100
    settings.QC_MIN_ITEMS = 1000  # given-up items disagree; no suspension here
    g = make_generation()
    make_qc_pool(generation=g, size=100)
    for i in range(200):
        make_task(generation=g, priority=i)
    labeler = make_labeler()
    rng = random.Random(20240601)
    kinds = []
    for _ in range(200):
        a = next_for(labeler=labeler, rng=rng)
        kinds.append(a.task.kind)
        _finish(a)
    qc = kinds.count(TaskKind.QUALITY_CONTROL)
    # Binomial(200, 0.25): mean 50, sd 6.1; four sd either side.
    assert 26 <= qc <= 74, qc
    # Random positions, not a block at the start or end.
    first_half = kinds[:100].count(TaskKind.QUALITY_CONTROL)
    assert 0 < first_half < qc


def test_it_serves_each_qc_item_at_most_once_per_labeler_and_to_every_labeler(settings):
    settings.QC_RATE = 1.0
    g = make_generation()
    pool = make_qc_pool(generation=g, size=3)
    for _ in range(6):
        make_task(generation=g)
    rng = random.Random(7)
    for labeler in (make_labeler(), make_labeler()):
        served = []
        for _ in range(5):
            a = next_for(labeler=labeler, rng=rng)
            served.append(a.task_id)
            label(a, AGREE)
        qc = [t for t in served if t in {p.pk for p in pool}]
        assert sorted(qc) == sorted(p.pk for p in pool)  # all three, once each
        assert len(set(served)) == len(served)


def test_it_serves_no_qc_item_when_there_is_no_normal_work(settings):
    settings.QC_RATE = 1.0
    make_qc_pool(generation=make_generation(), size=2)
    assert assignment_next(labeler=make_labeler(), rng=random.Random(1)) is None


def test_it_never_serves_qc_items_to_unscreened_labelers(settings):
    settings.QC_RATE = 1.0
    g = make_generation()
    make_qc_pool(generation=g, size=2)
    make_task(generation=g)
    make_screening_set(size=1)
    a = next_for(labeler=make_labeler(status=LabelerStatus.SCREENING), rng=random.Random(1))
    assert a.task.kind == TaskKind.SCREENING


def _one_of_three_checked_items_agreeing(settings: Any) -> tuple[Labeler, random.Random]:
    # A labeler whose rolling window (3 checked items, 1 agreeing: 33 % < 50 %)
    # suspends them at their next hand-out; plenty of normal and QC work left.
    settings.QC_RATE = 1.0
    settings.QC_WINDOW = 4
    settings.QC_MIN_ITEMS = 3
    settings.QC_SUSPEND_BELOW = 0.5
    g = make_generation()
    make_qc_pool(generation=g, size=8)
    for _ in range(12):
        make_task(generation=g)
    labeler = make_labeler()
    rng = random.Random(3)
    for pattern in (AGREE, DISAGREE, DISAGREE):
        label(next_for(labeler=labeler, rng=rng), pattern)
    return labeler, rng


def test_it_suspends_on_low_rolling_quality_and_reinstatement_starts_a_clean_window(settings):
    labeler, rng = _one_of_three_checked_items_agreeing(settings)
    assert labeler_rolling_quality(labeler=labeler).items == 3
    with pytest.raises(LabelerMayNotWork):
        assignment_next(labeler=labeler, rng=rng)
    labeler.refresh_from_db()
    assert labeler.status == LabelerStatus.SUSPENDED
    assert "1 of the last 3" in labeler.status_reason
    assert "gold" not in labeler.status_reason.lower()
    with pytest.raises(LabelerMayNotWork):
        assignment_next(labeler=labeler, rng=rng)

    later = timezone.now() + timedelta(seconds=1)
    labeler_set_status(labeler=labeler, status=LabelerStatus.ACTIVE, reason="talked it through", now=later)
    assert labeler_rolling_quality(labeler=labeler).items == 0
    a = next_for(labeler=labeler, rng=rng, now=later + timedelta(seconds=1))
    assert a is not None
    labeler.refresh_from_db()
    assert labeler.status == LabelerStatus.ACTIVE


def _checked(settings: Any, patterns: Sequence[Sequence[int]]) -> tuple[Labeler, random.Random, list[Assignment]]:
    # A labeler with one checked QC item per pattern in their window (a
    # window of 4, judged from 3 items, suspended below 50 %), then handed
    # normal work only, which leaves that window as it is.
    settings.QC_RATE = 1.0
    settings.QC_WINDOW = 4
    settings.QC_MIN_ITEMS = 3
    settings.QC_SUSPEND_BELOW = 0.5
    g = make_generation()
    make_qc_pool(generation=g, size=len(patterns) + 2)
    for _ in range(6):
        make_task(generation=g)
    labeler = make_labeler()
    rng = random.Random(5)
    items = []
    for pattern in patterns:
        item = next_for(labeler=labeler, rng=rng)
        assert item.task.kind == TaskKind.QUALITY_CONTROL
        label(item, pattern)
        items.append(item)
    settings.QC_RATE = 0.0
    return labeler, rng, items


def _judged(labeler: Labeler) -> tuple[bool, int]:
    # As a hand-out asks: the labeler row read afresh (qc_window_passed as
    # stored), in a transaction; (suspended, statements run).
    fresh = Labeler.objects.get(pk=labeler.pk)
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        suspended = labeler_quality_enforce(labeler=fresh)
    return suspended, len(queries)


def test_a_passed_window_is_scored_once_and_not_again_until_it_changes(settings):
    labeler, rng, _ = _checked(settings, (AGREE, AGREE, AGREE))
    suspended, scoring = _judged(labeler)
    assert not suspended
    assert Labeler.objects.get(pk=labeler.pk).qc_window_passed != ""
    # The same window again: only its ids are read, not its items, gold and ratings.
    assert _judged(labeler) == (False, 1)
    assert scoring >= 4

    settings.QC_RATE = 1.0
    label(next_for(labeler=labeler, rng=rng), DISAGREE)  # a fourth checked item: a new window, scored
    assert _judged(labeler) == (False, scoring)


def test_the_window_is_judged_as_every_other_agreement_figure_is(settings):
    # window_quality (the rolling window, read by its own statements) against
    # gold_outcomes (the admin's and the API's figures, through the ORM) on
    # the same items: agreeing, disagreeing, given up, expired, on gold with
    # and without an error, a rated alternative (not the solution's own step:
    # not judged), and an item that is not gold at all (left out).
    settings.QC_RATE = 1.0
    settings.QC_MIN_ITEMS = 1000  # no suspension while the items are made
    g = make_generation()
    make_qc_pool(generation=g, size=4)
    make_qc_pool(generation=g, size=3, error_steps=())
    for _ in range(3):
        make_task(generation=g)
    labeler = make_labeler()
    rng = random.Random(9)
    items = []
    for pattern in (AGREE, DISAGREE, [1, 1, 1, 1, 1], [1, -1], [0, 1, -1], "give up", "expire"):
        item = next_for(labeler=labeler, rng=rng)
        assert item.task.kind == TaskKind.QUALITY_CONTROL
        if pattern == "give up":  # one step rated, then given up
            step_rate(assignment_id=item.pk, user_id=None, step_index=0, completion_index=0, rating=1,
                      flagged=False, version=1)  # fmt: skip
            _finish(item)
        elif pattern == "expire":
            Assignment.objects.filter(pk=item.pk).update(status=AssignmentStatus.EXPIRED)
        else:
            label(item, pattern)
        items.append(item)
    step = LabeledStep.objects.get(assignment=items[0], index=0)
    StepRating.objects.create(step=step, completion_index=1, text="another way", rating=-1, version=99)
    settings.QC_RATE = 0.0
    normal = next_for(labeler=labeler, rng=rng)
    label(normal, AGREE)
    ids = [a.pk for a in (*items, normal)]

    judged = window_quality(ids)
    assert judged == summarise(gold_outcomes(Assignment.objects.filter(pk__in=ids)))
    assert judged.items == 7 and 0 < judged.agreed < 5 and 0 < judged.steps_agreed < judged.steps_rated
    assert window_quality(ids[:3]) == summarise(gold_outcomes(Assignment.objects.filter(pk__in=ids[:3])))
    assert window_quality([]).items == 0


def test_a_passed_window_is_judged_again_by_corrected_gold(settings):
    labeler, rng, items = _checked(settings, (AGREE, AGREE, AGREE))
    label(next_for(labeler=labeler, rng=rng), AGREE)  # judged and passed at this hand-out; normal work
    assert Labeler.objects.get(pk=labeler.pk).qc_window_passed != ""
    # The reviewers correct two of the gold answers: no error in those
    # solutions after all, so finding one there now disagrees (1 of 3).
    for item in items[:2]:
        solution = Solution.objects.get(tasks__pk=item.task_id)
        gold_set(solution=solution, steps=gold_steps_for_errors(step_count=solution.step_count, error_steps=()))
    with pytest.raises(LabelerMayNotWork):
        assignment_next(labeler=labeler, rng=rng)
    labeler.refresh_from_db()
    assert labeler.status == LabelerStatus.SUSPENDED
    assert "1 of the last 3" in labeler.status_reason


def test_a_passed_window_is_judged_again_by_a_stricter_threshold(settings):
    labeler, rng, _ = _checked(settings, (AGREE, AGREE, DISAGREE))  # 2 of 3: passes at 50 %
    label(next_for(labeler=labeler, rng=rng), AGREE)
    settings.QC_SUSPEND_BELOW = 0.7
    with pytest.raises(LabelerMayNotWork):
        assignment_next(labeler=labeler, rng=rng)
    labeler.refresh_from_db()
    assert labeler.status == LabelerStatus.SUSPENDED


def test_it_reports_agreement_per_labeler_and_per_generation(settings):
    settings.QC_RATE = 1.0
    g = make_generation()
    make_qc_pool(generation=g, size=2)
    make_task(generation=g, labelers_needed=2)
    good, bad = make_labeler(), make_labeler()
    rng = random.Random(11)
    for labeler, patterns in ((good, (AGREE, AGREE)), (bad, (AGREE, DISAGREE))):
        for pattern in patterns:
            a = next_for(labeler=labeler, rng=rng)
            assert a.task.kind == TaskKind.QUALITY_CONTROL
            label(a, pattern)
    mine = labeler_gold_agreement(labeler=good)
    assert (mine.items, mine.agreed, mine.rate) == (2, 2, 1.0)
    theirs = labeler_gold_agreement(labeler=bad, kind=TaskKind.QUALITY_CONTROL, generation=g)
    assert (theirs.items, theirs.agreed) == (2, 1)
    # Steps: AGREE rates 3 steps all acceptable; DISAGREE rates 5, step 2 (+1) is not.
    assert (theirs.steps_agreed, theirs.steps_rated) == (3 + 4, 3 + 5)
    whole = generation_gold_agreement(generation=g)
    assert (whole.items, whole.agreed, whole.rate) == (4, 3, 0.75)


def test_it_computes_inter_annotator_agreement_on_overlapped_tasks():
    g = make_generation()
    t1 = make_task(generation=g, labelers_needed=2, priority=2)
    t2 = make_task(generation=g, labelers_needed=2, priority=1)
    make_task(generation=g, priority=0)  # single-labeled: not part of IAA
    a, b = make_labeler(), make_labeler()
    # t1: a = [1, 1, -1], b = [1, 1, -1]; t2: a = [1, 0, 1, 1, 1], b = [1, -1]
    plans = {
        (a.pk, t1.pk): [1, 1, -1],
        (b.pk, t1.pk): [1, 1, -1],
        (a.pk, t2.pk): [1, 0, 1, 1, 1],
        (b.pk, t2.pk): [1, -1],
    }
    for labeler in (a, b):
        for _ in range(2):
            assignment = next_for(labeler=labeler)
            label(assignment, plans[(labeler.pk, assignment.task_id)])
    iaa = generation_inter_annotator_agreement(generation=g)
    assert iaa.tasks == 2
    # Units with two ratings: t1 steps 0,1,2 and t2 steps 0,1 -> 5.
    assert iaa.step_units == 5
    # Pairs: t1 same first error (2 == 2), t2 differs (None vs 1).
    assert (iaa.first_error_pairs, iaa.first_error_agreed, iaa.first_error_rate) == (2, 1, 0.5)
    # Values: (1,1),(1,1),(-1,-1),(1,1),(0,-1). n=10: n(-1)=3, n(0)=1, n(1)=6.
    # d(-1,0)=(3+1-2)^2=4; d(0,1)=(1+6-3.5)^2=12.25; d(-1,1)=(10-4.5)^2=30.25.
    # Do = 2*4/10 = 0.8; De = 2*(3*1*4 + 3*6*30.25 + 1*6*12.25)/(10*9) = 1260/90 = 14.
    assert iaa.alpha == pytest.approx(1 - 0.8 / 14)  # 0.9429
    [pair] = generation_inter_annotator_agreement_by_pair(generation=g)
    assert (pair.labeler_a, pair.labeler_b) == tuple(sorted((a.pk, b.pk)))
    assert pair.agreement.alpha == pytest.approx(iaa.alpha)


def test_it_chooses_a_stable_overlap_share():
    keys = [f"solution-{i}" for i in range(2000)]
    doubled = sum(overlap_labelers_needed(key=k, share_=0.1) == 2 for k in keys)
    assert 140 <= doubled <= 260
    assert [overlap_labelers_needed(key=k, share_=0.1) for k in keys[:50]] == [
        overlap_labelers_needed(key=k, share_=0.1) for k in keys[:50]
    ]


def test_it_exports_qc_and_screening_flags_for_tasks_made_by_the_services(settings):
    settings.QC_RATE = 1.0
    g = make_generation()
    make_qc_pool(generation=g, size=1)
    make_task(generation=g)
    [screening] = make_screening_set(size=1)
    newcomer = make_labeler(status=LabelerStatus.SCREENING)
    label(next_for(labeler=newcomer), AGREE)
    veteran = make_labeler()
    rng = random.Random(5)
    label(next_for(labeler=veteran, rng=rng), AGREE)  # the QC item
    label(next_for(labeler=veteran, rng=rng), AGREE)  # normal work
    records = {(r["labeler"], r["is_quality_control_question"], r["is_initial_screening_question"], r["generation"])
               for r in iter_prm800k_records()}  # fmt: skip
    assert records == {
        (str(newcomer.uuid), False, True, -1),
        (str(veteran.uuid), True, False, g.number),
        (str(veteran.uuid), False, False, g.number),
    }
    assert Task.objects.get(pk=screening.pk).generation.number == -1


def test_a_hand_out_judges_the_window_of_the_status_it_locked_not_the_one_read_before(settings):
    # The QC window of submit + next's hand-out is sent with the labeler's
    # lock, for the status the request read before it. Suspended and
    # reinstated by an admin in between, the labeler starts a clean window:
    # the one sent for the old status (three checked items, one agreeing)
    # must not suspend them.
    labeler, rng = _one_of_three_checked_items_agreeing(settings)
    read_before = Labeler.objects.get(pk=labeler.pk)  # what the request read before its transaction
    assert read_before.status == LabelerStatus.ACTIVE
    now = timezone.now()
    labeler_set_status(labeler=labeler, status=LabelerStatus.SUSPENDED, reason="a check", now=now)
    labeler_set_status(labeler=labeler, status=LabelerStatus.ACTIVE, reason="talked it through",
                       now=now + timedelta(seconds=1))  # fmt: skip
    with transaction.atomic():  # as submit + next hands out: the window sent with the lock
        a = assignment_next_in_transaction(labeler=read_before, rng=rng, now=now + timedelta(seconds=2))
    assert a is not None
    labeler.refresh_from_db()
    assert labeler.status == LabelerStatus.ACTIVE
    assert read_before.status_changed_at == labeler.status_changed_at  # the request's copy holds the locked status
