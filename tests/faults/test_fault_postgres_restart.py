"""Restart PostgreSQL (the private cluster) while labelers are rating through gunicorn."""

from __future__ import annotations

import threading
import time

from .conftest import connect, scenario
from .labeler_client import LabelerClient, duplicated_ratings, missing_acks

LABELERS = 4
OK = (200, 302)  # /next/ answers with a redirect to the task


def label_until(labeler: LabelerClient, stop: threading.Event, steps: int) -> None:
    """Next task, rate every step, submit; after any failure start over from /next/ (which resumes)."""
    while not stop.is_set():
        assignment = labeler.next_assignment()
        if assignment is None:
            time.sleep(0.2)
            continue
        ok = all(labeler.rate(assignment, step).status == 200 for step in range(steps))
        if not (ok and labeler.submit(assignment).status == 200):
            time.sleep(0.2)


def test_a_postgres_restart_fails_requests_cleanly_and_loses_no_acknowledged_rating(
    fault_db, gunicorn, private_postgres
):
    setup = scenario(fault_db, "labeling", tasks=60, labelers=LABELERS)
    server = gunicorn(fault_db, workers=2, threads=4)
    server.start()
    labelers = [LabelerClient(server.port, cookies, timeout=20) for cookies in setup["sessions"]]
    stop = threading.Event()
    threads = [threading.Thread(target=label_until, args=(lab, stop, setup["steps"])) for lab in labelers]
    for thread in threads:
        thread.start()
    time.sleep(4)
    acked_before = sum(len(lab.acks) for lab in labelers)

    private_postgres.stop()
    outage_started = time.monotonic()
    time.sleep(3)
    during = [o for lab in labelers for o in lab.outcomes if o.status not in OK]
    private_postgres.start()
    outage = time.monotonic() - outage_started
    marks = [len(lab.outcomes) for lab in labelers]
    time.sleep(6)
    stop.set()
    for thread in threads:
        thread.join(30)
    after = [o for lab, mark in zip(labelers, marks, strict=True) for o in lab.outcomes[mark:]]

    assert acked_before > 0
    # During the outage requests failed with a server error, quickly: nobody hung.
    assert during, "no request failed while PostgreSQL was down"
    assert {o.status for o in during} <= {500, 502, 503}, {o.status for o in during}
    assert max(o.seconds for lab in labelers for o in lab.outcomes) < 10
    assert outage >= 3
    # Afterwards the same server (its stale connections replaced) answers again.
    assert sum(1 for o in after if o.status in OK) >= 10, [o.status for o in after]
    assert after[-LABELERS:] and all(o.status in OK for o in after[-LABELERS * 2 :]), [o.status for o in after]

    with connect(fault_db) as db:
        acks = [ack for lab in labelers for ack in lab.acks]
        assert missing_acks(db, acks) == []
        assert duplicated_ratings(db) == 0
        submitted = {a for lab in labelers for a in lab.submitted}
        stored = {
            row[0] for row in db.execute("SELECT id FROM labeling_assignment WHERE status = 'submitted'").fetchall()
        }
        assert submitted <= stored
        # No task handed to the same labeler twice, and none to more labelers than it needs.
        assert (
            db.execute(
                "SELECT count(*) FROM pg_constraint WHERE conname = 'assignment_one_per_task_and_labeler'"
            ).fetchone()[0]
            + db.execute(
                "SELECT count(*) FROM pg_indexes WHERE indexname = 'assignment_one_per_task_and_labeler'"
            ).fetchone()[0]
            >= 1
        )
        over = db.execute(
            """SELECT t.id, t.labelers_needed, count(a.id) FROM labeling_task t JOIN labeling_assignment a
               ON a.task_id = t.id
               AND (a.status = 'submitted' OR (a.status = 'in_progress' AND a.lease_expires_at > now()))
               GROUP BY t.id HAVING count(a.id) > t.labelers_needed"""
        ).fetchall()
        assert over == []
