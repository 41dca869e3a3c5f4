"""Set-ups and actions for the fault tests, run as a child process on the private database.

    python -m tests.faults.scenario <command> '<json kwargs>'

The last line printed is the JSON answer. The fault tests' own process never opens the
private database through the ORM (its Django is configured for the shared test
database); everything that needs the ORM or the services happens here.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import django

django.setup()

from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.contrib.sessions.backends.db import SessionStore  # noqa: E402
from django.db import connections  # noqa: E402
from django.utils import timezone  # noqa: E402
from django.utils.crypto import get_random_string  # noqa: E402

from labeling.models import (  # noqa: E402
    Assignment,
    AssignmentStatus,
    FinishReason,
    Generation,
    GenerationStatus,
    Labeler,
    LabelerStatus,
    Problem,
    Solution,
    Task,
    content_sha256,
    text_sha256,
)

STEPS = ["First, $x + 1 = 3$.", "So $x = 2$.", "Then $x^2 = 4$.", "The answer is $\\boxed{4}$."]


def _labelers(count: int, prefix: str) -> list[Labeler]:
    made = []
    for i in range(count):
        user = User.objects.create_user(username=f"{prefix}{i}", password="fault-password-1")
        made.append(Labeler.objects.create(user=user, status=LabelerStatus.ACTIVE))
    return made


def _session(labeler: Labeler) -> dict[str, str]:
    user = labeler.user
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    return {"sessionid": store.session_key or "", "csrftoken": get_random_string(32)}


def _tasks(generation: Generation, count: int, *, two_labelers_every: int = 0, tag: str = "t") -> list[Task]:
    tasks = []
    for i in range(count):
        text = f"Fault problem {tag}-{i}: if $x + 1 = 3$, what is $x^2$?"
        problem = Problem.objects.create(
            unique_id=f"fault/{tag}/{i}.json", problem=text, problem_sha256=text_sha256(text), answer="4"
        )
        solution = Solution.objects.create(
            problem=problem, steps=STEPS, content_sha256=content_sha256(STEPS, "4"), final_answer="4"
        )
        needed = 2 if two_labelers_every and i % two_labelers_every == 0 else 1
        tasks.append(Task.objects.create(generation=generation, solution=solution, priority=-i, labelers_needed=needed))
    return tasks


def labeling(*, tasks: int = 40, labelers: int = 4, two_labelers_every: int = 3) -> dict[str, Any]:
    """An open generation of 4-step tasks (every third needs two labelers) and signed-in labelers."""
    generation = Generation.objects.create(number=1, status=GenerationStatus.OPEN)
    _tasks(generation, tasks, two_labelers_every=two_labelers_every)
    people = _labelers(labelers, "fault")
    return {"sessions": [_session(p) for p in people], "steps": len(STEPS)}


def export_seed(*, tasks: int = 200, labelers: int = 100, writers: int = 4, writer_tasks: int = 400) -> dict[str, Any]:
    """tasks x labelers submitted records (frozen labels, bulk), plus open work for the writers."""
    history = Generation.objects.create(number=1, status=GenerationStatus.CLOSED)
    people = _labelers(labelers, "hist")
    label = json.dumps(
        [{"completions": [{"text": s, "rating": 1, "flagged": None}], "human_completion": None,
          "chosen_completion": 0 if i < len(STEPS) - 1 else None} for i, s in enumerate(STEPS)]
    )  # fmt: skip
    now = timezone.now()
    for task in _tasks(history, tasks, tag="hist"):
        Assignment.objects.bulk_create(
            Assignment.for_task(task, labeler=p, status=AssignmentStatus.SUBMITTED, started_at=now,
                       submitted_at=now, last_activity_at=now, total_time_ms=1000, finish_reason=FinishReason.SOLUTION,
                       label_steps_json=label)
            for p in people
        )  # fmt: skip
    Task.objects.filter(generation=history).update(labelers_needed=labelers)
    work = Generation.objects.create(number=2, status=GenerationStatus.OPEN)
    _tasks(work, writer_tasks, tag="work")
    _labelers(writers, "writer")
    return {"submitted": Assignment.objects.filter(status=AssignmentStatus.SUBMITTED).count()}


def export_writers(*, seconds: float, log: str, go: str) -> dict[str, Any]:
    """Writer threads labeling through the services until ``seconds`` pass.

    Submissions are serialised by one lock and appended to ``log`` after their commit,
    so the log is the commit order of submissions: a consistent snapshot of the
    submitted assignments is exactly a prefix of it (plus what was there before).
    Ratings (not serialised) keep the database busy in between. Starts when the file
    ``go`` exists.
    """
    from labeling.work.queue import assignment_next
    from labeling.work.rating import assignment_submit, step_rate

    submit_lock = threading.Lock()
    sink = Path(log).open("a")  # noqa: SIM115 (shared by the threads, closed after they join)
    counts = {"ratings": 0, "submits": 0}
    while not Path(go).exists():
        time.sleep(0.01)
    deadline = time.monotonic() + seconds

    def work(labeler: Labeler) -> None:
        try:
            while time.monotonic() < deadline:
                assignment = assignment_next(labeler=labeler)
                if assignment is None:
                    return
                for index in range(len(STEPS)):
                    step_rate(assignment_id=assignment.pk, user_id=None, step_index=index, completion_index=0,
                              rating=1, flagged=False, version=index + 1)  # fmt: skip
                    counts["ratings"] += 1
                with submit_lock:
                    assignment_submit(assignment_id=assignment.pk, user_id=None)
                    sink.write(f"{assignment.pk}\n")
                    sink.flush()
                    counts["submits"] += 1
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=work, args=(p,)) for p in Labeler.objects.filter(user__username__startswith="writer")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sink.close()
    return counts


def pipeline(*, stage: str, training: dict[str, Any], labels: int = 6, problems: int = 3, per_problem: int = 4,
             k: int = 4) -> dict[str, Any]:  # fmt: skip
    """A generation that has reached ``stage`` (training: dispatched; scoring: trained here, chunks queued)."""
    from activelearn.generations import pipeline, steps
    from tests.activelearn import pipeline_factories as factories

    factories.labels(labels)
    factories.pool(problems=problems, per_problem=per_problem)
    generation = pipeline.generation_start(config=factories.config(k=k, per_problem=False, training=training))
    if stage in ("training", "scoring"):
        steps.generation_prepare(generation_id=generation.pk)  # dispatches training (on commit)
    if stage == "scoring":
        # Trained here; its chunks are sent to the broker on commit. (The training
        # message prepare sent finds the checkpoint READY and does nothing.)
        steps.generation_train(generation_id=generation.pk)
    generation.refresh_from_db()
    return {"generation": generation.pk, "status": generation.status}


def reconcile() -> dict[str, Any]:
    from activelearn.generations.reconciler import pipeline_reconcile

    report = pipeline_reconcile()
    return {"redispatched": report.redispatched, "chunks_requeued": report.chunks_requeued, "failed": report.failed}


COMMANDS: dict[str, Callable[..., Any]] = {
    "labeling": labeling,
    "export_seed": export_seed,
    "export_writers": export_writers,
    "pipeline": pipeline,
    "reconcile": reconcile,
}

if __name__ == "__main__":
    result = COMMANDS[sys.argv[1]](**json.loads(sys.argv[2] if len(sys.argv) > 2 else "{}"))
    print(json.dumps(result, default=str))
