"""A whole campaign: simulated labelers take and finish N tasks; what a hand-out costs per window of tasks.

Whether submit + next gets more expensive as a campaign uses up its queue,
under three ways of running autovacuum on the queue tables (labeling_task,
labeling_assignment):

  off      autovacuum off for the queue tables (reloption autovacuum_enabled = off)
  default  the cluster's autovacuum settings (the product's per-table settings reset)
  shipped  the settings the product's migrations set (docs/operations.md, "Autovacuum")

Each mode runs on its own copy of one release-scale database
(``CREATE DATABASE ... TEMPLATE``, built by benchmarks/labeling_load.py's
``build`` and vacuumed once after it is built, as autovacuum leaves an
import), so every mode starts from the same fresh queue; nothing vacuums
during a run but autovacuum. ``default`` and ``shipped`` need the cluster's
autovacuum on (``SHOW autovacuum``); where it is off they are skipped, and
the report says so.

The load is labeling_load.py's labelers (sign in, next task, key presses,
submit + next) against the product under gunicorn, until ``--tasks`` tasks
are finished. Per window of ``--window`` finished tasks it reports, for
submit + next and for the key press: p50/p95/p99, and the server's CPU per
request (the gunicorn thread and its PostgreSQL backend, from the cost
probe, benchmarks/serving/probe.py); the server's CPU per request of any
kind (gunicorn tree and its backends, labeling_load.CpuMeter); the load
generator's own CPU share; autovacuum's CPU on the database; dead rows and
autovacuum runs of the queue tables.

Same-run baseline: one more simulated labeler presses a key on the floor
(benchmarks/serving/floor.py, a key press in one statement) every
``--floor-interval`` seconds throughout, served by its own gunicorn; its CPU
per press is measured in every window. The floor does the same work at the
start and at the end of a campaign, so its drift is the machine's, and
product / floor can be compared between days.

``--explain`` prints the key lines of EXPLAIN (ANALYZE, BUFFERS) of the
next-task search (labeling.work.hotpath.TASK_CANDIDATE) at the start and at
every window boundary.

  .venv/bin/python benchmarks/labeling_campaign.py --tasks 100000
  .venv/bin/python benchmarks/labeling_campaign.py --tasks 20000 --labelers 100 --think 0.5,2 --modes off,shipped

The pace of a real campaign (200 labelers, 1-5 s between clicks) is about
7 tasks a second: 100k tasks take four hours. A shorter think time packs the
same tasks into less time, which gives autovacuum fewer chances per task
than production would; the dead rows it reports show how far it kept up.

Measured windows (``--measure-seconds``): the latency budget is for the real
pace, so the campaign can alternate. At the fresh queue and after every
``--window`` tasks, the fast labelers pause and ``--measure-labelers``
others (default 200) work at ``--measure-think`` (default 1-5 s) for
``--measure-seconds``; their p50/p95/p99 are reported per checkpoint, apart
from the windows of tasks. They are the same labelers at every checkpoint and
go on with the task they left, as people coming back do; their ratings are in
the stored == acknowledged check. Their tasks count towards ``--tasks``.
The floor's presses in the same seconds are reported beside them: the
latency the machine gives a one-statement press at that moment.

  .venv/bin/python benchmarks/labeling_campaign.py --tasks 100000 --labelers 40 --think 0.05,0.3 \
      --measure-seconds 120 --modes shipped
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import labeling_load as load

MODES = ("off", "default", "shipped")
QUEUE_TABLES = ("labeling_task", "labeling_assignment")
FLOOR = "floor press"  # the baseline's requests, apart from the product's endpoints
COUNTERS = ("acked", "unanswered_ratings", "errors", "http_errors")  # load.Labeler's, summed over labelers


# --- databases ----------------------------------------------------------------
def _url_for(url: str, dbname: str) -> str:
    return urllib.parse.urlparse(url)._replace(path=f"/{dbname}").geturl()


def _autovacuum_on(url: str) -> bool:
    with load._connect(url, "postgres") as admin:
        return bool(admin.execute("SHOW autovacuum").fetchone()[0] == "on")


def settle(url: str) -> None:
    """The built database as autovacuum leaves an import: vacuumed and analysed, once (a no-op when nothing changed)."""
    with load._connect(url) as db:
        db.execute("VACUUM (ANALYZE)")


def copy_for(url: str, mode: str) -> str:
    """A fresh copy of the built database for one mode; returns its URL."""
    base = urllib.parse.urlparse(url).path.lstrip("/")
    name = f"{base}_{mode}"
    with load._connect(url, "postgres") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        # FILE_COPY (PostgreSQL 15+): copies the files after a checkpoint
        # instead of writing every page into the WAL.
        strategy = " STRATEGY FILE_COPY" if admin.info.server_version >= 150000 else ""
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{base}"{strategy}')
    return _url_for(url, name)


def drop(url: str) -> None:
    name = urllib.parse.urlparse(url).path.lstrip("/")
    with load._connect(url, "postgres") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def set_mode(url: str, mode: str) -> str:
    """The queue tables' autovacuum as the mode has it; returns their reloptions, as stored."""
    from labeling.checks import QUEUE_TABLE_AUTOVACUUM

    with load._connect(url) as db:
        for table in QUEUE_TABLES:
            if mode == "off":
                db.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
            elif mode == "default":
                db.execute(f"ALTER TABLE {table} RESET ({', '.join(QUEUE_TABLE_AUTOVACUUM[table])})")
        rows = db.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s) ORDER BY relname", [list(QUEUE_TABLES)]
        ).fetchall()
    return "; ".join(f"{name}: {', '.join(options or []) or 'cluster defaults'}" for name, options in rows)


def table_state(db: Any) -> dict[str, dict[str, int]]:
    rows = db.execute(
        """SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count
           FROM pg_stat_user_tables WHERE relname = ANY(%s)""",
        [list(QUEUE_TABLES)],
    ).fetchall()
    return {r[0]: {"live": r[1], "dead": r[2], "autovacuums": r[3], "autoanalyzes": r[4]} for r in rows}


def explain_candidate(db: Any, generation_id: int) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the next-task search for a labeler with no history; its locks rolled back.

    The planner's cost estimates are left out: what the search walked (rows
    removed, buffers, time) is the point.
    """
    import re

    from labeling.work.hotpath import TASK_CANDIDATE, task_candidate_params

    sql = TASK_CANDIDATE.format(tried="", lock=" FOR UPDATE OF t SKIP LOCKED")
    with db.transaction(force_rollback=True):
        now = db.execute("SELECT now()").fetchone()[0]
        args = task_candidate_params(generation_id=generation_id, labeler_id=-1, at=now)
        plan = [row[0] for row in db.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", args).fetchall()]
    return [re.sub(r"  \(cost=[^)]*\)", "", line) for line in plan]


# --- the labelers -------------------------------------------------------------
class Windows:
    """Requests and their costs per window of finished tasks; the generator's CPU and the time at each boundary."""

    def __init__(self, size: int, total: int, boundary: Callable[[int], None]) -> None:
        self.size, self.total, self.boundary = size, total, boundary
        self.lock = threading.Lock()
        self.finished = 0
        self.stats: list[dict[str, list[float]]] = [defaultdict(list)]
        self.costs: list[dict[str, list[list[int]]]] = [defaultdict(list)]
        self.done = threading.Event()
        self.crossed = threading.Event()  # a boundary since the fast phase began: time to measure

    def finished_one(self) -> None:
        with self.lock:
            self.finished += 1
            # Tasks finished after the last boundary (labelers stopping) fall in a window not reported.
            if self.finished > self.total or (self.finished % self.size and self.finished < self.total):
                return
            self.stats.append(defaultdict(list))
            self.costs.append(defaultdict(list))
            self.boundary(self.finished)
            self.crossed.set()
            if self.finished >= self.total:
                self.done.set()


class _Current(dict[str, list[Any]]):
    """What Labeler.request appends to: the lists of the window at hand (under Windows.lock)."""

    def __init__(self, windows: Windows, kind: str) -> None:
        super().__init__()
        self.windows, self.kind = windows, kind

    def __getitem__(self, label: str) -> list[Any]:
        return getattr(self.windows, self.kind)[-1][label]  # type: ignore[no-any-return]


class _CountingLabeler(load.Labeler):
    """Counts its finished tasks into the campaign; its requests go to the window at hand (or, measured, to
    the measured window's, see ``_measure``)."""

    def __init__(self, port: int, cookies: dict[str, str], windows: Windows, rate_via: str) -> None:
        super().__init__(port, cookies, _Current(windows, "stats"), windows.lock, _Current(windows, "costs"), rate_via)
        self.windows = windows

    def request(self, label: str, method: str, path: str, body: dict[str, Any] | None = None,
                htmx: bool = False, as_json: bool = False) -> tuple[int, dict[str, str], str]:  # fmt: skip
        answer = super().request(label, method, path, body, htmx, as_json)
        if label == "submit+next" and answer[0] == 200:
            self.windows.finished_one()
        return answer


def _floor_presses(labeler: load.Labeler, until: threading.Event, interval: float,
                   started: threading.Event) -> dict[str, int]:  # fmt: skip
    """The baseline: one key press on the floor every ``interval`` seconds, on one task, until ``until`` is set.

    ``started`` is set once the first press is answered (or the floor has failed): the labelers start after
    it, so even a window shorter than the floor's start-up (a few tasks at no think time) has its baseline."""
    import re

    try:
        _, headers, _ = labeler.request(FLOOR + " (next)", "POST", "/next/", {})
        match = re.search(r"/assignments/(\d+)/", headers.get("Location", ""))
        if match is None:
            return {"assignment": 0, "acked": 0}
        assignment = int(match.group(1))
        _, _, page = labeler.request(FLOOR + " (page)", "GET", f"/assignments/{assignment}/")
        version, acked = load._state_version(page), 0
        while True:
            status, _, text = labeler.request(
                FLOOR, "POST", f"/assignments/{assignment}/presses/",
                {"presses": [{"step": 0, "completion": 0, "version": version, "rating": acked % 2}]}, as_json=True,
            )  # fmt: skip
            if status == 200:
                version, acked = int(json.loads(text)["version"]), acked + 1
            started.set()
            if until.wait(interval):
                return {"assignment": assignment, "acked": acked}
    finally:
        started.set()


def _run_all(labelers: list[_CountingLabeler], deadline: float, think: tuple[float, float] | None,
             args: argparse.Namespace, until: threading.Event | None = None) -> None:  # fmt: skip
    """Runs each labeler in its own thread (arriving at ``--spawn-rate``) until the deadline or ``until`` is set."""
    for lab in labelers:
        lab.stop.clear()
        # A labeler back after a pause opens a new connection, as a browser does: the server closed the
        # idle one (gunicorn --keep-alive), and a request on it would fail.
        lab.conn.close()
    threads = [
        threading.Thread(target=lab.run, args=(deadline, think, args.steps, i / args.spawn_rate if args.spawn_rate
                                               else 0.0), daemon=True)
        for i, lab in enumerate(labelers)
    ]  # fmt: skip
    for t in threads:
        t.start()
    if until is not None:

        def stop_when() -> None:
            while not until.wait(0.5):
                if not any(t.is_alive() for t in threads):
                    return
            for lab in labelers:
                lab.stop.set()

        threading.Thread(target=stop_when, daemon=True).start()
    for t in threads:
        t.join()


def _measure(labelers: list[_CountingLabeler], windows: Windows, args: argparse.Namespace,
             deadline: float, floor: load.Labeler) -> dict[str, Any]:  # fmt: skip
    """A window at real pace: ``--measure-labelers`` labelers, ``--measure-think`` between clicks, for
    ``--measure-seconds``. Its requests are kept apart from the windows of tasks (whose CPU they still count in).

    The same labelers come back at every checkpoint and go on with the task they left. The floor's presses
    during the window are its same-run baseline: their latency moves with the machine, not with the queue."""
    stats: dict[str, list[float]] = defaultdict(list)
    costs: dict[str, list[list[int]]] = defaultdict(list)
    before = {name: sum(getattr(x, name) for x in labelers) for name in COUNTERS}
    for lab in labelers:
        lab.stats, lab.costs = stats, costs
    floor_sinks = floor.stats, floor.costs
    floor.stats, floor.costs = stats, costs  # its own label (FLOOR) keeps it apart
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start, cpu, finished = time.monotonic(), usage.ru_utime + usage.ru_stime, windows.finished
    think = None if args.measure_think_range == (0.0, 0.0) else args.measure_think_range
    _run_all(labelers, min(deadline, start + args.measure_seconds), think, args)
    floor.stats, floor.costs = floor_sinks
    usage = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.monotonic() - start
    return {"at": finished, "wall_s": wall, "finished": windows.finished - finished,
            "generator_share": (usage.ru_utime + usage.ru_stime - cpu) / wall,
            "stats": dict(stats), "costs": dict(costs),
            **{name: sum(getattr(x, name) for x in labelers) - before[name] for name in COUNTERS}}  # fmt: skip


def drive(port: int, floor_port: int, sessions: list[dict[str, str]], floor_session: dict[str, str],
          args: argparse.Namespace, think: tuple[float, float] | None, out: Any) -> None:  # fmt: skip
    """Runs in its own process: one thread per labeler, one for the floor; a message at every window boundary.

    With ``--measure-seconds``, the campaign alternates: a measured window at real pace (at the start and
    after every boundary), then the fast labelers until the next boundary.
    """

    def boundary(finished: int) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out.send(("boundary", finished, time.monotonic(), usage.ru_utime + usage.ru_stime))

    windows = Windows(args.window, args.tasks, boundary)
    labelers, measured_labelers = (
        [_CountingLabeler(port, cookies, windows, args.rate_via) for cookies in part]
        for part in (sessions[: args.labelers], sessions[args.labelers :])
    )
    floor = load.Labeler(
        floor_port, floor_session, _Current(windows, "stats"), windows.lock, _Current(windows, "costs")
    )
    floor_result: dict[str, int] = {}
    campaign_over = threading.Event()
    measured: list[dict[str, Any]] = []
    boundary(0)
    deadline = time.monotonic() + args.max_hours * 3600

    floor_started = threading.Event()

    def baseline() -> None:
        floor_result.update(_floor_presses(floor, campaign_over, args.floor_interval, floor_started))

    floor_thread = threading.Thread(target=baseline, daemon=True)
    floor_thread.start()
    floor_started.wait(60)

    def measure() -> None:
        if measured_labelers and time.monotonic() < deadline:
            measured.append(_measure(measured_labelers, windows, args, deadline, floor))
            out.send(("measured", {k: v for k, v in measured[-1].items() if k not in ("stats", "costs")}
                      | {"latency": _latency(measured[-1]["stats"])}))  # fmt: skip

    measure()
    while not windows.done.is_set() and time.monotonic() < deadline:
        windows.crossed.clear()
        before = windows.finished
        _run_all(labelers, deadline, think, args, until=windows.crossed if measured_labelers else windows.done)
        if windows.finished == before:
            break  # the queue ran dry
        measure()
    windows.done.set()
    campaign_over.set()
    floor_thread.join(30)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    everyone = labelers + measured_labelers
    out.send(("result", {
        "stats": [dict(s) for s in windows.stats], "costs": [dict(c) for c in windows.costs],
        "measured": measured, "finished": windows.finished,
        **{name: sum(getattr(x, name) for x in everyone) for name in COUNTERS},
        "floor": floor_result, "floor_errors": floor.errors, "generator_cpu": usage.ru_utime + usage.ru_stime,
    }))  # fmt: skip


def _latency(stats: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {name: _requests(stats.get(name, []), []) for name in ("submit+next", "rate")}


# --- one mode -------------------------------------------------------------------
class AutovacuumMeter(load.CpuMeter):
    """CPU of the autovacuum workers on the benchmark database (sampled: a run shorter than the interval is missed)."""

    def __init__(self, url: str) -> None:
        super().__init__(0, url, "", interval=0.2)

    def _pids(self, db: Any) -> list[tuple[str, int]]:
        rows = db.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'autovacuum worker'"
        ).fetchall()
        return [("autovacuum", int(r[0])) for r in rows]


def _switch_database(url: str) -> None:
    # make_sessions writes Labeler rows and sessions through Django's own
    # connection: point it at this mode's copy.
    from django.db import connections

    connections.close_all()
    connections["default"].settings_dict["NAME"] = urllib.parse.urlparse(url).path.lstrip("/")


def run_mode(args: argparse.Namespace, env: dict[str, str], mode: str) -> dict[str, Any]:
    url = copy_for(args.database_url, mode)
    try:
        return _run_mode(args, env, mode, url)
    finally:
        if not args.keep:
            drop(url)


def _run_mode(args: argparse.Namespace, env: dict[str, str], mode: str, url: str) -> dict[str, Any]:
    reloptions = set_mode(url, mode)
    _switch_database(url)
    sessions = load.make_sessions(0, args.labelers + 1 + args.measure_labelers)
    floor_session = sessions.pop(args.labelers)
    here = argparse.Namespace(**{**vars(args), "database_url": url})
    floor_args = argparse.Namespace(**{**vars(here), "workers": 1, "threads": 1})
    servers = {"product": load.start_server(here, env, "product")}
    think = None if args.think_range == (0.0, 0.0) else args.think_range
    try:
        servers["floor"] = load.start_server(floor_args, env, "floor")
        with load._connect(url) as db:
            row = db.execute("SELECT id FROM labeling_generation WHERE number = %s", [load.LOAD_GENERATION])
            generation = int(row.fetchone()[0])
            before_ratings = load.stored_ratings(url)
            receive, send = multiprocessing.Pipe(duplex=False)
            process = multiprocessing.Process(
                target=drive, args=(args.port, args.port + 1, sessions, floor_session, args, think, send)
            )
            meters = {"product": load.CpuMeter(servers["product"].pid, url, "bench-product"),
                      "autovacuum": AutovacuumMeter(url)}  # fmt: skip
            for meter in meters.values():
                meter.__enter__()
            boundaries: list[dict[str, Any]] = []
            try:
                process.start()
                send.close()  # the child's end only: a child that dies ends recv() with EOFError
                while True:
                    kind, *message = receive.recv()
                    if kind == "result":
                        result = message[0]
                        break
                    if kind == "measured":
                        _measured_progress(mode, message[0])
                        continue
                    finished, at, generator_cpu = message
                    mark = {"finished": finished, "at": at, "generator_cpu": generator_cpu,
                            "load": os.getloadavg()[0], "tables": table_state(db),
                            **{f"{name}_{kind}": meter.seconds(kind) for name, meter in meters.items()
                               for kind in ("app", "pg", "autovacuum")}}  # fmt: skip
                    if args.explain:
                        mark["plan"] = explain_candidate(db, generation)
                    boundaries.append(mark)
                    _progress(mode, boundaries)
                process.join()
            finally:
                for meter in meters.values():
                    meter.__exit__()
            stored = load.stored_ratings(url) - before_ratings
            floor_rows = db.execute(
                """SELECT count(*) FROM labeling_steprating r JOIN labeling_labeledstep s ON s.id = r.step_id
                   WHERE s.assignment_id = %s AND r.rating IS NOT NULL""",
                [result["floor"].get("assignment", 0)],
            ).fetchone()[0]
    finally:
        for server in servers.values():
            server.terminate()
        for server in servers.values():
            server.wait(30)
    return {"mode": mode, "reloptions": reloptions, "boundaries": boundaries, "result": result,
            "stored_check": load._check(result, stored - floor_rows)}  # fmt: skip


def _progress(mode: str, boundaries: list[dict[str, Any]]) -> None:
    last = boundaries[-1]
    tables = ", ".join(f"{t} dead {s['dead']} (autovacuums {s['autovacuums']})" for t, s in last["tables"].items())
    print(f"[{mode}] {last['finished']} tasks finished; {tables}", file=sys.stderr, flush=True)


def _measured_progress(mode: str, window: dict[str, Any]) -> None:
    sn, key = window["latency"]["submit+next"], window["latency"]["rate"]
    print(f"[{mode}] measured at {window['at']} tasks: submit + next p95 {sn['p95']:.1f} p99 {sn['p99']:.1f} ms"
          f" ({sn['count']}), key press p95 {key['p95']:.1f} p99 {key['p99']:.1f} ms ({key['count']});"
          f" errors {window['errors']}", file=sys.stderr, flush=True)  # fmt: skip


# --- the report ---------------------------------------------------------------------
def _requests(values: list[float], costs: list[list[int]]) -> dict[str, float]:
    """One label's requests: their count, latency percentiles (ms) and mean CPU per request (ms)."""
    app, pg = _cost(costs)
    return {"count": len(values), "p50": load.pct(values, 50), "p95": load.pct(values, 95),
            "p99": load.pct(values, 99), "app_ms": app, "pg_ms": pg, "cpu_ms": app + pg}  # fmt: skip


def _cost(costs: list[list[int]]) -> tuple[float, float]:
    """Mean app and PostgreSQL CPU in ms per request (probe fields 3 and 4: app_us, pg_us)."""
    if not costs:
        return float("nan"), float("nan")
    return statistics.fmean(c[3] for c in costs) / 1000, statistics.fmean(c[4] for c in costs) / 1000


def windows_of(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per whole window: latencies and CPU of submit + next and the key press, the baseline, the tables."""
    result, marks = run["result"], run["boundaries"]
    rows = []
    for i in range(1, len(marks)):
        a, b = marks[i - 1], marks[i]
        stats, costs = result["stats"][i - 1], result["costs"][i - 1]
        wall = b["at"] - a["at"]
        product = sum(len(v) for k, v in stats.items() if not k.startswith(FLOOR))
        row: dict[str, Any] = {"tasks": b["finished"], "wall_s": wall,
               "tasks_per_s": (b["finished"] - a["finished"]) / wall,
               "generator_share": (b["generator_cpu"] - a["generator_cpu"]) / wall, "load": b["load"],
               "tables": b["tables"], "plan": b.get("plan"),
               "server_ms": 1000 * (b["product_app"] - a["product_app"] + b["product_pg"] - a["product_pg"])
               / max(product, 1),
               "autovacuum_s": b["autovacuum_autovacuum"] - a["autovacuum_autovacuum"]}  # fmt: skip
        for name in ("submit+next", "rate", FLOOR):
            row[name] = _requests(stats.get(name, []), costs.get(name, []))
        row["floor_ms"] = row[FLOOR]["cpu_ms"]
        rows.append(row)
    return rows


def measured_of(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per measured window at real pace: p50/p95/p99 and CPU of submit + next and the key press."""
    rows = []
    for window in run["result"].get("measured", []):
        row: dict[str, Any] = {"tasks": window["at"], "wall_s": window["wall_s"], "finished": window["finished"],
                               "tasks_per_s": window["finished"] / window["wall_s"],
                               "generator_share": window["generator_share"], "errors": window["errors"]}  # fmt: skip
        for name in ("submit+next", "rate", FLOOR):
            row[name] = _requests(window["stats"].get(name, []), window["costs"].get(name, []))
        rows.append(row)
    return rows


def _ratio(end: float, start: float) -> float:
    return end / start if start else float("nan")


def report(run: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    rows = windows_of(run)
    result = run["result"]
    print(f"\n== {run['mode']}: {result['finished']} tasks finished by {args.labelers} labelers (think {args.think} s);"
          f" {run['reloptions']}")  # fmt: skip
    print(f"{'tasks':>7}{'tasks/s':>8}{'s+n p95':>8}{'p99':>6}{'s+n ms':>7}{'(pg)':>6}{'key p95':>8}{'p99':>6}"
          f"{'key ms':>7}{'(pg)':>6}{'all ms':>7}{'floor':>6}{'gen %':>6}{'dead task':>10}{'assign':>8}"
          f"{'av runs':>8}{'av s':>6}{'load':>6}")  # fmt: skip
    for row in rows:
        sn, key, tables = row["submit+next"], row["rate"], row["tables"]
        task, assign = tables.get("labeling_task", {}), tables.get("labeling_assignment", {})
        print(f"{row['tasks']:>7}{row['tasks_per_s']:>8.1f}{sn['p95']:>8.1f}{sn['p99']:>6.1f}{sn['cpu_ms']:>7.2f}"
              f"{sn['pg_ms']:>6.2f}{key['p95']:>8.1f}{key['p99']:>6.1f}{key['cpu_ms']:>7.2f}{key['pg_ms']:>6.2f}"
              f"{row['server_ms']:>7.2f}{row['floor_ms']:>6.2f}{100 * row['generator_share']:>6.0f}"
              f"{task.get('dead', 0):>10}{assign.get('dead', 0):>8}"
              f"{task.get('autovacuums', 0) + assign.get('autovacuums', 0):>8}{row['autovacuum_s']:>6.1f}"
              f"{row['load']:>6.1f}")  # fmt: skip
    for row in rows if args.explain else []:
        print(f"-- the next-task search after {row['tasks']} tasks:\n   " + "\n   ".join(row["plan"] or []))
    measured = measured_of(run)
    if measured:
        print(f"-- measured at real pace: {args.measure_labelers} labelers, think {args.measure_think} s,"
              f" {args.measure_seconds:g} s at each checkpoint")  # fmt: skip
        print(f"{'tasks':>7}{'tasks/s':>8}{'s+n n':>7}{'p50':>6}{'p95':>6}{'p99':>6}{'s+n ms':>7}"
              f"{'key n':>7}{'p50':>6}{'p95':>6}{'p99':>6}{'key ms':>7}{'floor p95':>10}{'p99':>6}{'gen %':>6}"
              f"{'errors':>7}")  # fmt: skip
        for row in measured:
            sn, key, floor = row["submit+next"], row["rate"], row[FLOOR]
            print(f"{row['tasks']:>7}{row['tasks_per_s']:>8.1f}{sn['count']:>7}{sn['p50']:>6.1f}{sn['p95']:>6.1f}"
                  f"{sn['p99']:>6.1f}{sn['cpu_ms']:>7.2f}{key['count']:>7}{key['p50']:>6.1f}{key['p95']:>6.1f}"
                  f"{key['p99']:>6.1f}{key['cpu_ms']:>7.2f}{floor['p95']:>10.1f}{floor['p99']:>6.1f}"
                  f"{100 * row['generator_share']:>6.0f}{row['errors']:>7}")  # fmt: skip
        worst = {name: (max(r[name]["p95"] for r in measured), max(r[name]["p99"] for r in measured))
                 for name in ("submit+next", "rate")}  # fmt: skip
        print(f"worst checkpoint: submit + next p95 {worst['submit+next'][0]:.1f} / p99 {worst['submit+next'][1]:.1f}"
              f" ms, key press p95 {worst['rate'][0]:.1f} / p99 {worst['rate'][1]:.1f} ms")  # fmt: skip
    print(f"errors {result['errors']} (floor {result['floor_errors']}); {run['stored_check']}")
    summary: dict[str, Any] = {"mode": run["mode"], "reloptions": run["reloptions"], "windows": rows,
                               "measured": measured,
                               "errors": result["errors"], "stored_ok": run["stored_check"].endswith("OK")}  # fmt: skip
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        floor_ratio = _ratio(last["floor_ms"], first["floor_ms"])
        for name, label in (("submit+next", "submit + next"), ("rate", "key press")):
            ratio = _ratio(last[name]["cpu_ms"], first[name]["cpu_ms"])
            pg = _ratio(last[name]["pg_ms"], first[name]["pg_ms"])
            summary[f"{name} end/start"] = ratio
            summary[f"{name} end/start over floor"] = _ratio(ratio, floor_ratio)
            print(f"{label} CPU, last window / first: {ratio:.2f} (PostgreSQL {pg:.2f}); floor {floor_ratio:.2f};"
                  f" over the floor {_ratio(ratio, floor_ratio):.2f}")  # fmt: skip
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/bench_campaign",
                        help="the built database (each mode runs on a copy named <it>_<mode>)")  # fmt: skip
    parser.add_argument("--tasks", type=int, default=100_000, help="tasks to hand out and finish per mode")
    parser.add_argument("--window", type=int, default=10_000, help="tasks per reported window")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--labelers", type=int, default=200)
    parser.add_argument("--think", default="1,5", help="think time range in seconds (0,0: none)")
    parser.add_argument("--solutions", type=int, default=0,
                        help="solutions (open tasks) of the built database; default: --tasks and a tenth")  # fmt: skip
    parser.add_argument("--steps", type=int, default=10, help="steps per solution")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the database even if it exists")
    parser.add_argument("--keep", action="store_true", help="keep each mode's copy of the database")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN the next-task search at every boundary")
    parser.add_argument("--floor-interval", type=float, default=0.1, help="seconds between the baseline's presses")
    parser.add_argument("--workers", type=int, default=4 * (os.cpu_count() or 2))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--port", type=int, default=8775, help="the product's; the floor's is the next one")
    parser.add_argument("--rate-via", choices=["presses", "form"], default="presses")
    parser.add_argument("--spawn-rate", type=float, default=10.0, help="labelers starting per second")
    parser.add_argument("--cache-url", default="redis://127.0.0.1:6379/11", help="the servers' CACHE_URL (sessions)")
    parser.add_argument("--max-hours", type=float, default=12.0, help="stop a mode after this long, finished or not")
    parser.add_argument("--json", help="also write the windows of every mode to this file")
    parser.add_argument("--measure-seconds", type=float, default=0.0,
                        help="a measured window at real pace this long at the start and after every --window tasks"
                             " (0: none; the campaign's own labelers are the load throughout)")  # fmt: skip
    parser.add_argument("--measure-labelers", type=int, default=200, help="labelers of the measured windows")
    parser.add_argument("--keep-alive", type=int, default=load.KEEP_ALIVE_S,
                        help="seconds gunicorn keeps an idle connection")  # fmt: skip
    parser.add_argument("--measure-think", default="1,5", help="think time range of the measured windows (s)")
    args = parser.parse_args(argv)
    args.think_range = load.think_range(parser, "--think", args.think)
    args.measure_think_range = load.think_range(parser, "--measure-think", args.measure_think)
    if args.measure_seconds <= 0:
        args.measure_labelers = 0
    args.solutions = args.solutions or args.tasks + args.tasks // 10 + args.labelers + args.measure_labelers
    args.max_labelers = 2 * (args.labelers + args.measure_labelers + 1)
    args.access_log, args.baseline = False, None
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes: {', '.join(sorted(unknown))}")

    env = {**os.environ, "DATABASE_URL": args.database_url, "SECRET_KEY": "benchmark-only-secret-key-0123456789",
           "DEBUG": "false", "SECURE_COOKIES": "false", "STATIC_ROOT": tempfile.mkdtemp(prefix="bench-static-"),
           "DJANGO_SETTINGS_MODULE": "annotate.settings", "LOG_LEVEL": "WARNING",
           "CACHE_URL": args.cache_url}  # fmt: skip
    os.environ.update(env)
    import django

    django.setup()
    load.build(args, env)
    with load._connect(args.database_url) as db:
        open_tasks = db.execute(
            """SELECT count(*) FROM labeling_task t JOIN labeling_generation g ON g.id = t.generation_id
               WHERE g.number = %s AND t.status = 'open' AND t.kind = 'normal'""",
            [load.LOAD_GENERATION],
        ).fetchone()[0]
    if open_tasks < args.tasks + args.labelers + args.measure_labelers + 1:
        raise SystemExit(f"the database has {open_tasks} open tasks, fewer than --tasks and a lease for each"
                         " labeler: --rebuild (with --solutions)")  # fmt: skip
    settle(args.database_url)
    autovacuum = _autovacuum_on(args.database_url)
    summaries = []
    for mode in modes:
        if mode != "off" and not autovacuum:
            print(f"\n== {mode}: skipped, the cluster's autovacuum is off (SHOW autovacuum)")
            continue
        summaries.append(report(run_mode(args, env, mode), args))
    if len(summaries) > 1:
        print("\n== submit + next CPU, last window / first (and over the same-run floor)")
        for s in summaries:
            print(f"{s['mode']:<9}{s.get('submit+next end/start', float('nan')):>6.2f}"
                  f"{s.get('submit+next end/start over floor', float('nan')):>8.2f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=1, default=str))


if __name__ == "__main__":
    main()
