"""The next-task search against the number of labelers at work: the product's statement and the one it replaced.

    .venv/bin/python benchmarks/search_leases.py \\
        --database-url postgres://postgres@127.0.0.1:5442/bench_campaign_base [--leases 0,40,240,1000] [--rounds 15]

The front of the queue is the tasks being labeled right now, one per labeler
at work; every hand-out searches from that front. The script copies the
release-scale database that benchmarks/labeling_load.py builds (``CREATE
DATABASE ... TEMPLATE``; the copy is dropped at the end), gives the N best
open tasks a live lease each, held by N labelers (as many hand-outs would
leave them), and runs ``EXPLAIN (ANALYZE, BUFFERS)`` of the search for a
labeler with no history: the product's (labeling.work.hotpath.TASK_CANDIDATE)
and PREVIOUS below, alternating, ``--rounds`` times each on one warm
connection, its row locks rolled back. It prints medians of the execution
time and the buffers read, and checks that both find the same task.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")

from benchmarks.labeling_campaign import copy_for, drop  # noqa: E402
from benchmarks.labeling_load import _connect  # noqa: E402

# The search before the live leases were read once into a hashed set: each
# leased task's places were counted by probing its assignments.
PREVIOUS = """
    SELECT t.id, t.priority, t.labelers_needed FROM labeling_task t
    WHERE t.generation_id = %s AND t.status = %s AND t.kind = %s{tried}
      AND (SELECT COUNT(*) FROM labeling_assignment a WHERE a.task_id = t.id
           AND (a.status = %s OR (a.status = %s AND a.lease_expires_at > %s))) < t.labelers_needed
      AND NOT EXISTS (SELECT 1 FROM labeling_assignment m WHERE m.task_id = t.id AND m.labeler_id = %s)
    ORDER BY t.priority DESC, t.id
    LIMIT 1{lock}
"""

LEASE_FRONT = """
    INSERT INTO labeling_assignment (status, started_at, last_activity_at, lease_expires_at, finish_reason_text,
        labeler_id, task_id, ratings_reset_version, version, task_kind)
    SELECT 'in_progress', now(), now(), now() + interval '30 minutes', '', l.id, f.id, 0, 0, 'normal'
    FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, id) AS n FROM labeling_task
          WHERE generation_id = %(generation)s AND status = 'open' AND kind = 'normal'
          ORDER BY priority DESC, id LIMIT %(leases)s) f
    JOIN (SELECT id, row_number() OVER (ORDER BY id) AS n FROM labeling_labeler WHERE status_reason = %(mark)s) l
      ON l.n = f.n
"""


def _plan(db: Any, sql: str, params: list[Any]) -> tuple[float, int, int]:
    """(execution ms, buffers, task id found) of one run of ``sql``, its locks rolled back."""
    with db.transaction(force_rollback=True):
        lines = [row[0] for row in db.execute("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + sql, params).fetchall()]
        found = db.execute(sql, params).fetchone()
    ms = float(next(m.group(1) for line in lines if (m := re.search(r"Execution Time: ([\d.]+) ms", line))))
    buffers = int(next(m.group(1) for line in lines if (m := re.search(r"Buffers: shared hit=(\d+)", line))))
    return ms, buffers, int(found[0]) if found else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", required=True, help="the release-scale database (labeling_load.py builds it)")
    parser.add_argument("--leases", default="0,40,240,1000", help="labelers at work, comma-separated")
    parser.add_argument("--rounds", type=int, default=15, help="runs of each statement per count, alternating")
    args = parser.parse_args()
    try:
        counts = [int(part) for part in args.leases.split(",")]
    except ValueError:
        parser.error(f"--leases: expected whole numbers separated by commas, got {args.leases!r}")

    import django

    django.setup()
    from labeling.work.hotpath import TASK_CANDIDATE, task_candidate_params

    copy = copy_for(args.database_url, f"search_{os.getpid()}")
    try:
        with _connect(copy) as db:
            mark = f"search-leases {uuid.uuid4()}"
            db.execute(
                """INSERT INTO labeling_labeler
                       (uuid, status, status_reason, exclude_labels, created_at, qc_window_passed)
                   SELECT gen_random_uuid(), 'active', %s, false, now(), '' FROM generate_series(1, %s)""",
                [mark, max(counts) + 1],
            )
            me = int(db.execute("SELECT max(id) FROM labeling_labeler WHERE status_reason = %s", [mark]).fetchone()[0])
            generation = int(db.execute("SELECT id FROM labeling_generation WHERE status = 'open' AND phase = 2 "
                                        "ORDER BY number LIMIT 1").fetchone()[0])  # fmt: skip
            lock = " FOR UPDATE OF t SKIP LOCKED"
            now = db.execute("SELECT now()").fetchone()[0]
            product = TASK_CANDIDATE.format(tried="", lock=lock)
            product_params = task_candidate_params(generation_id=generation, labeler_id=me, at=now)
            previous = PREVIOUS.format(tried="", lock=lock)
            previous_params = [generation, "open", "normal", "submitted", "in_progress", now, me]
            print("labelers at work | product ms | previous ms | ratio | product buffers | previous buffers")
            for leases in counts:
                db.execute("DELETE FROM labeling_assignment WHERE status = 'in_progress'")
                db.execute(LEASE_FRONT, {"generation": generation, "leases": leases, "mark": mark})
                db.execute("VACUUM ANALYZE labeling_assignment")
                runs: dict[str, list[tuple[float, int, int]]] = {"product": [], "previous": []}
                for _ in range(args.rounds):
                    runs["product"].append(_plan(db, product, product_params))
                    runs["previous"].append(_plan(db, previous, previous_params))
                found = {run[2] for name in runs for run in runs[name]}
                if len(found) != 1:
                    sys.exit(f"the two searches found different tasks at {leases} leases: {sorted(found)}")
                ms = {name: statistics.median(run[0] for run in runs[name]) for name in runs}
                buffers = {name: statistics.median(run[1] for run in runs[name]) for name in runs}
                print(f"{leases} | {ms['product']:.3f} | {ms['previous']:.3f} | {ms['product'] / ms['previous']:.2f} | "
                      f"{buffers['product']:.0f} | {buffers['previous']:.0f}")  # fmt: skip
    finally:
        drop(copy)


if __name__ == "__main__":
    main()
