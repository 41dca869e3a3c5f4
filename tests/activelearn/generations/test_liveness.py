"""A worker's pulse keeps its claim alive while it lives, stops when it hangs, and a starting
worker reconciles by itself."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from activelearn.generations import pipeline
from activelearn.generations.liveness import Pulse
from activelearn.generations.reconciler import pipeline_reconcile_at_worker_start
from activelearn.models import GenerationRun
from tests.activelearn.pipeline_factories import config, queued


class Beats:
    def __init__(self, answer: bool = True) -> None:
        self.count = 0
        self.answer = answer
        self.threads: set[str] = set()

    def __call__(self) -> bool:
        self.count += 1
        self.threads.add(threading.current_thread().name)
        return self.answer


def test_it_beats_from_its_own_thread_while_the_work_is_silent() -> None:
    beats = Beats()
    with Pulse(beats, every_s=0.02, stall_s=10):
        time.sleep(0.3)  # a silent stretch: a model loading, say
    assert beats.count >= 5
    assert beats.threads == {"pipeline-pulse"}
    settled = beats.count
    time.sleep(0.1)
    assert beats.count == settled  # stopped with the block


def test_it_holds_its_beat_once_the_work_stops_moving() -> None:
    beats = Beats()
    with Pulse(beats, every_s=0.02, stall_s=0.1) as pulse:
        time.sleep(0.3)
        stalled = beats.count
        time.sleep(0.2)
        assert beats.count == stalled  # hung: the claim is left to go stale
        pulse.tick()
        time.sleep(0.1)
        assert beats.count > stalled  # moving again
    assert stalled <= 6


def test_it_says_when_the_claim_is_lost_and_stops_beating() -> None:
    beats = Beats(answer=False)
    with Pulse(beats, every_s=0.02, stall_s=10) as pulse:
        time.sleep(0.2)
    assert pulse.lost and beats.count == 1


@pytest.mark.django_db(transaction=True)
def test_it_refreshes_a_claim_in_the_database_from_its_thread(settings) -> None:
    settings.PIPELINE_GPU_QUEUE = "test-gpu"
    settings.PIPELINE_CPU_QUEUE = "test-cpu"
    generation = pipeline.generation_start(config=config())
    old = timezone.now() - timedelta(hours=1)
    runs = GenerationRun.objects.filter(generation=generation)
    runs.update(heartbeat_at=old)
    with Pulse(lambda: runs.update(heartbeat_at=timezone.now()) == 1, every_s=0.05, stall_s=10):
        time.sleep(0.3)
    heartbeat = runs.get().heartbeat_at
    assert heartbeat is not None and heartbeat > old + timedelta(minutes=59)


@pytest.mark.django_db
def test_a_worker_on_a_pipeline_queue_reconciles_at_start_and_once_a_stale_interval_later(
    settings, django_capture_on_commit_callbacks
) -> None:
    settings.PIPELINE_GPU_QUEUE = "test-gpu"
    settings.PIPELINE_CPU_QUEUE = "test-cpu"
    generation = pipeline.generation_start(config=config())
    GenerationRun.objects.filter(generation=generation).update(dispatched_at=timezone.now() - timedelta(days=1))

    with django_capture_on_commit_callbacks() as callbacks:
        timer = pipeline_reconcile_at_worker_start(queues=["celery", "test-cpu"])
    assert timer is not None
    timer.cancel()
    assert timer.interval == settings.PIPELINE_HEARTBEAT_STALE_S + settings.PIPELINE_HEARTBEAT_EVERY_S
    # The message lost with the dead worker is sent again by the starting one.
    assert queued(callbacks) == [("generation_prepare_task", (generation.pk,), "test-cpu")]


@pytest.mark.django_db
def test_a_worker_on_other_queues_or_with_the_pass_off_does_not_reconcile(
    settings, django_capture_on_commit_callbacks
) -> None:
    settings.PIPELINE_GPU_QUEUE = "test-gpu"
    settings.PIPELINE_CPU_QUEUE = "test-cpu"
    generation = pipeline.generation_start(config=config())
    GenerationRun.objects.filter(generation=generation).update(dispatched_at=timezone.now() - timedelta(days=1))
    with django_capture_on_commit_callbacks() as callbacks:
        assert pipeline_reconcile_at_worker_start(queues=["exports"]) is None
        settings.PIPELINE_RECONCILE_AT_WORKER_START = False
        assert pipeline_reconcile_at_worker_start(queues=["test-cpu"]) is None
    assert queued(callbacks) == []


def test_the_default_settings_recover_a_dead_workers_step_within_two_minutes(settings) -> None:
    # Claim stale after STALE_S; found by the next pass (beat, or the starting worker's
    # second pass STALE_S + EVERY_S after it starts): at most STALE_S + max(period, EVERY_S).
    from annotate import settings as defaults

    bound = defaults.PIPELINE_HEARTBEAT_STALE_S + max(
        defaults.PIPELINE_RECONCILE_EVERY_S, defaults.PIPELINE_HEARTBEAT_EVERY_S
    )
    assert bound <= 120
    assert defaults.PIPELINE_HEARTBEAT_STALE_S >= 2 * defaults.PIPELINE_HEARTBEAT_EVERY_S
