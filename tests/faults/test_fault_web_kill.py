"""SIGKILL the web server between a rating's commit and its response."""

from __future__ import annotations

import threading

from .conftest import connect, scenario, wait_for
from .labeler_client import LabelerClient, duplicated_ratings, missing_acks


def test_a_server_killed_after_commit_keeps_every_acknowledged_rating_and_the_labeler_resumes(
    fault_db, gunicorn, tmp_path
):
    setup = scenario(fault_db, "labeling", tasks=4, labelers=1)
    flag = tmp_path / "slow" / "flag"
    flag.parent.mkdir()
    server = gunicorn(fault_db, app="tests.faults.slow_wsgi:application", workers=1, threads=2,
                      FAULT_SLOW_FLAG=str(flag), FAULT_SLOW_SECONDS="60")  # fmt: skip
    server.start()
    labeler = LabelerClient(server.port, setup["sessions"][0], timeout=90)
    assignment = labeler.next_assignment()
    assert assignment is not None
    assert labeler.rate(assignment, 0).status == 200
    assert labeler.rate(assignment, 1).status == 200

    # Step 2: committed, then the server dies before it answers.
    flag.touch()
    answer: list[int] = []
    pending = threading.Thread(target=lambda: answer.append(labeler.rate(assignment, 2).status))
    pending.start()
    wait_for((flag.parent / "committed").exists, timeout=30, what="the rating to commit")
    server.kill()
    pending.join(30)
    assert answer == [0], "the client must not have been answered"
    flag.unlink()

    with connect(fault_db) as db:
        assert missing_acks(db, labeler.acks) == []
        assert duplicated_ratings(db) == 0
        # The unacknowledged rating may be there (it was committed) but only once.
        stored = db.execute(
            """SELECT s.index, count(*) FROM labeling_steprating r JOIN labeling_labeledstep s ON s.id = r.step_id
               WHERE s.assignment_id = %s GROUP BY s.index ORDER BY s.index""",
            [assignment],
        ).fetchall()
        assert stored == [(0, 1), (1, 1), (2, 1)]

    server.start()
    # The labeler asks for work again: the same assignment, at the step after the last stored one.
    assert labeler.next_assignment() == assignment
    page = labeler.request("GET", f"/assignments/{assignment}/")
    assert page.status == 200
    # The client repeats the click it never got an answer for: a no-op, not a second row.
    assert labeler.rate(assignment, 2).status == 200
    assert labeler.rate(assignment, 3).status == 200
    assert labeler.submit(assignment).status == 200

    with connect(fault_db) as db:
        assert missing_acks(db, labeler.acks) == []
        assert duplicated_ratings(db) == 0
        status, steps = db.execute(
            """SELECT a.status, (SELECT count(*) FROM labeling_labeledstep s WHERE s.assignment_id = a.id)
               FROM labeling_assignment a WHERE a.id = %s""",
            [assignment],
        ).fetchone()
        assert (status, steps) == ("submitted", 4)
        assert db.execute("SELECT count(*) FROM labeling_assignment").fetchone()[0] == 2  # the next task was leased
