"""Response time of the research admin's pages on the demo data: admin lists and the dashboard.

Run against a database that ``load_demo`` filled (the default: ``var/annotate.sqlite3`` of
``make run``; ``--database-url`` for another). Each page is requested ``--repeats``
times through Django's test client as a signed-in superuser, in this process (no
network, no server), and the median is reported beside the median of the admin index (``/admin/``, the baseline)
measured in the same run, so a busy machine shows up in both, and beside the CPU time the
request took in this process (SQLite runs in it), which a busy machine inflates least.

    python benchmarks/staff_pages.py
    python benchmarks/staff_pages.py --database-url sqlite:////tmp/demo.sqlite3 --repeats 15

Nothing is written except one staff user (``bench-staff``), created if missing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    "/dashboard/",
    "/admin/",
    "/admin/labeling/problem/",
    "/admin/labeling/solution/",
    "/admin/labeling/task/",
    "/admin/labeling/assignment/",
    "/admin/labeling/labeler/",
    "/admin/labeling/generation/",
    "/admin/activelearn/prmcheckpoint/",
    "/admin/activelearn/solutionscore/",
]
GOAL_MS = 300.0


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=f"sqlite:///{ROOT / 'var' / 'annotate.sqlite3'}")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
    os.environ.setdefault("DEBUG", "true")  # as `make run` serves it (no collected static manifest)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    from labeling.models import Solution, Task

    setup_test_environment()  # the test client's ALLOWED_HOSTS ("testserver")
    user, _ = User.objects.get_or_create(username="bench-staff", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    print(
        f"data: {Solution.objects.count()} solutions, {Task.objects.count()} tasks; "
        f"{args.repeats} requests per page; load {_load()}"
    )

    def timed(url: str) -> tuple[float, float, int, int]:
        client.get(url)  # warm: templates, the first query plans
        times, cpu = [], []
        queries = 0
        status = 0
        for _ in range(args.repeats):
            with CaptureQueriesContext(connection) as captured:
                started, started_cpu = time.perf_counter(), time.process_time()
                response = client.get(url)
                times.append((time.perf_counter() - started) * 1000)
                # CPU time of this process (SQLite runs in it): what a busy machine inflates least.
                cpu.append((time.process_time() - started_cpu) * 1000)
            status, queries = response.status_code, len(captured)
        return statistics.median(times), statistics.median(cpu), queries, status

    baseline, _, _, _ = timed("/admin/")
    print(f"{'page':<38} {'median ms':>10} {'CPU ms':>8} {'x /admin/':>10} {'queries':>8}  status")
    worst = worst_cpu = 0.0
    for url in PAGES:
        median, cpu, queries, status = timed(url)
        worst, worst_cpu = max(worst, median), max(worst_cpu, cpu)
        print(f"{url:<38} {median:>10.1f} {cpu:>8.1f} {median / baseline:>10.1f} {queries:>8}  {status}")
    print(
        f"slowest page: {worst:.0f} ms wall, {worst_cpu:.0f} ms CPU (goal < {GOAL_MS:.0f} ms; baseline /admin/ "
        f"{baseline:.0f} ms); load {_load()}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
