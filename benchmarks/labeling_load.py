"""Load test of the labeler workflow on PostgreSQL at release scale.

Builds (or reuses) a database with >=100k solutions, >=1M stored step labels
and >=100k open tasks using INSERT ... SELECT generate_series, starts gunicorn
on 127.0.0.1, and drives simulated labelers from a separate process with the
standard library only (http.client + threads): sign in -> next task -> rate
steps -> submit (which hands over the next task) -> ...

Modes:
  think   N labelers (default 200) pausing 1-5 s between clicks; goal: p95 < 25 ms
          for rating and next-task.
  closed  no think time; concurrency steps up (e.g. 8,16,32,64) to find where p95
          crosses 100 ms.

Reports p50/p95/p99 per endpoint, throughput, and checks that the ratings stored
in the database equal the ratings the server acknowledged. Loopback only.

The load generation also holds QC_POOL quality-control items (gold that
accepts any rating, so the simulated labelers always agree): hand-outs draw
them at QC_RATE as they would in production, and a labeler who has finished
QC_MIN_ITEMS of them has a rolling QC window that each hand-out judges
(the closed loop gets there within its first seconds; the soak's labelers,
at ~20 tasks each, do not).

The generator shares the machine with the server, so its own CPU is reported
(user+sys of the driving process), and so is the server's: gunicorn and
PostgreSQL CPU seconds over the run, per request.

Serving: gunicorn with gthread workers (keep-alive; a sync worker closes the
connection after every response), four single-threaded processes per core by
default: a request spends most of its time waiting on PostgreSQL round trips,
and threads of one process queue on the GIL after each of them.

  .venv/bin/python benchmarks/labeling_load.py --mode think --duration 60
  .venv/bin/python benchmarks/labeling_load.py --mode closed --duration 60 --concurrency 8,16,32,64

Soak (--soak): the think mode for 10 minutes (200 labelers unless told otherwise), then
one PASS/FAIL line per criterion: failure ratio < 1 %, p95 of rate and next-task within
the 25 ms budget, stored ratings == acknowledged ratings. Exits 1 when any fails.

  .venv/bin/python benchmarks/labeling_load.py --soak

Side by side (--floor, --baseline CHECKOUT): the same load on two servers in
alternating runs, medians and ratios. --floor: the least the stack can do
(benchmarks/serving/floor.py). --baseline: the product as another checkout
has it, e.g. before a change, measured in the same run (this machine's speed
drifts by a third between invocations; alternation shares the drift):

  git worktree add /tmp/before HEAD~3 && cp -r static/vendor /tmp/before/static/
  .venv/bin/python benchmarks/labeling_load.py --baseline /tmp/before --mode closed --concurrency 1 --duration 30
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
HISTORY_GENERATION, LOAD_GENERATION = 9000, 9001
COST_HEADER = "X-Bench-Cost"  # benchmarks.serving.probe
KEEP_ALIVE_S = 75  # gunicorn --keep-alive: longer than a labeler's pause between clicks
PASSWORD = "bench-password-1"
QC_POOL = 20  # QC_ITEMS_MAX's default: the QC items of one generation


# --- database ---------------------------------------------------------------
def _connect(url: str, dbname: str | None = None) -> Any:
    import psycopg

    parts = urllib.parse.urlparse(url)
    return psycopg.connect(
        host=urllib.parse.unquote(parts.hostname or ""), port=parts.port or 5432, user=parts.username or "postgres",
        password=parts.password, dbname=dbname or parts.path.lstrip("/"), autocommit=True,
    )  # fmt: skip


def build(args: argparse.Namespace, env: dict[str, str]) -> None:
    dbname = urllib.parse.urlparse(args.database_url).path.lstrip("/")
    with _connect(args.database_url, "postgres") as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone():
            admin.execute(f'CREATE DATABASE "{dbname}"')
    subprocess.run([PY, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True)
    # A database cache (CACHES) needs its table; a no-op when none is configured.
    subprocess.run([PY, "manage.py", "createcachetable"], cwd=ROOT, env=env, check=True)
    with _connect(args.database_url) as db:
        have = db.execute(
            "SELECT count(*) FROM auth_user WHERE username = %s", [f"bench{args.max_labelers - 1}"]
        ).fetchone()
        if have and have[0] and not args.rebuild:
            print("reusing the existing benchmark database", file=sys.stderr)
            _qc_pool(db)
            _reset_load(db)
            return
        t0 = time.perf_counter()
        n, k = args.solutions, args.steps
        stmts = [
            "TRUNCATE labeling_steprating, labeling_labeledstep, labeling_assignment, labeling_task,"
            " labeling_stepalternative, labeling_solution, labeling_problem, labeling_generation,"
            " labeling_labeler, labeling_goldstep CASCADE",
            "DELETE FROM auth_user WHERE username LIKE 'bench%%'",
            f"""INSERT INTO labeling_problem (unique_id, problem, problem_sha256, solution, answer, subject, split,
                created_at)
                SELECT 'bench/' || i, 'Find $x$ if $x^2 = ' || (i::bigint * i) || '$ and $x > 0$. (' || i || ')',
                       md5(i::text), 'reference', i::text, 'Algebra', 'train', now()
                FROM generate_series(1, {n}) AS i""",
            f"""INSERT INTO labeling_solution (problem_id, steps, content_sha256, final_answer, source_model,
                grading_note, generator, source_key, created_at)
                SELECT p.id, (SELECT jsonb_agg('Step ' || j || ': so $x_{{' || j || '}} = \\frac{{' || p.id || '}}{{'
                    || j || '}}$.') FROM generate_series(1, {k}) AS j), md5('s' || p.id), p.id::text, 'bench', '',
                    'bench', '', now()
                FROM labeling_problem p""",
            f"""INSERT INTO labeling_generation (number, phase, status, config, error, created_at)
                VALUES ({HISTORY_GENERATION}, 2, 'closed', '{{}}', '', now()),
                       ({LOAD_GENERATION}, 2, 'open', '{{}}', '', now())""",
            # History: every solution labeled once in the closed generation (>=1M step labels).
            """INSERT INTO labeling_labeler (uuid, status, status_reason, exclude_labels, created_at)
                SELECT md5('hist' || i)::uuid, 'active', '', false, now() FROM generate_series(1, 100) AS i""",
            f"""INSERT INTO labeling_task (generation_id, solution_id, kind, is_quality_control, serial, priority,
                labelers_needed, absent_question_keys, status, created_at)
                SELECT g.id, s.id, 'normal', false, 0, random(), 1, '', 'done', now()
                FROM labeling_solution s, labeling_generation g WHERE g.number = {HISTORY_GENERATION}""",
            f"""INSERT INTO labeling_assignment (task_id, labeler_id, status, started_at, last_activity_at,
                submitted_at, total_time_ms, finish_reason, finish_reason_text, ratings_reset_version, version,
                task_kind)
                SELECT t.id, (SELECT min(id) FROM labeling_labeler) + (t.id % 100), 'submitted', now(), now(), now(),
                       60000, 'solution', '', 0, 11, 'normal'
                FROM labeling_task t JOIN labeling_generation g ON g.id = t.generation_id
                WHERE g.number = {HISTORY_GENERATION}""",
            f"""INSERT INTO labeling_labeledstep (assignment_id, index, chosen_completion)
                SELECT a.id, j, CASE WHEN j = {k - 1} THEN NULL ELSE 0 END
                FROM labeling_assignment a, generate_series(0, {k - 1}) AS j""",
            """INSERT INTO labeling_steprating (step_id, completion_index, text, rating, flagged, version, updated_at)
                SELECT id, 0, 'step', 1, NULL, 1, now() - interval '2 days' FROM labeling_labeledstep""",
            # The queue under load: every solution again, open, random priority.
            f"""INSERT INTO labeling_task (generation_id, solution_id, kind, is_quality_control, serial, priority,
                labelers_needed, absent_question_keys, status, created_at)
                SELECT g.id, s.id, 'normal', false, 0, random(), 1, '', 'open', now()
                FROM labeling_solution s, labeling_generation g WHERE g.number = {LOAD_GENERATION}""",
        ]
        for sql in stmts:
            db.execute(sql)
        _qc_pool(db)
        _users(db, args.max_labelers)
        db.execute("ANALYZE")
        counts = db.execute(
            "SELECT (SELECT count(*) FROM labeling_solution), (SELECT count(*) FROM labeling_steprating),"
            " (SELECT count(*) FROM labeling_task WHERE status = 'open')"
        ).fetchone()
        print(f"built in {time.perf_counter() - t0:.0f} s: solutions, step labels, open tasks = {counts}",
              file=sys.stderr)  # fmt: skip


def _users(db: Any, count: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
    from django.contrib.auth.hashers import make_password

    # One hash for every simulated labeler (sign-in cost is reported apart as "login").
    hashed = make_password(PASSWORD)
    db.execute(
        """INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email, is_staff,
           is_active, date_joined)
           SELECT %s, false, 'bench' || i, '', '', '', false, true, now() FROM generate_series(0, %s) AS i""",
        [hashed, count - 1],
    )


# Tasks made QC items, as quality_control_set_create leaves them, on
# solutions made gold with every rating acceptable: whatever a simulated
# labeler rates, they agree, so no one is suspended. One parameter: the task
# ids. Also benchmarks/press_cpu.py's (--qc-window).
QC_ITEMS_ANY_RATING = """
    WITH made AS (
        UPDATE labeling_task SET kind = 'quality_control', is_quality_control = true
        WHERE id = ANY(%s) RETURNING solution_id
    )
    INSERT INTO labeling_goldstep (solution_id, step_index, negative_ok, neutral_ok, positive_ok, note)
    SELECT s.id, i, true, true, true, '' FROM labeling_solution s JOIN made ON made.solution_id = s.id,
        generate_series(0, jsonb_array_length(s.steps) - 1) AS i
    ON CONFLICT DO NOTHING
"""


def _qc_pool(db: Any) -> None:
    """The load generation's QC items (QC_ITEMS_ANY_RATING), made once.

    A database built before them gets them on its next run.
    """
    g = f"(SELECT id FROM labeling_generation WHERE number = {LOAD_GENERATION})"
    have = db.execute(f"SELECT count(*) FROM labeling_task WHERE generation_id = {g} AND kind = 'quality_control'")
    if have.fetchone()[0]:
        return
    tasks = db.execute(f"SELECT id FROM labeling_task WHERE generation_id = {g} ORDER BY id LIMIT %s", [QC_POOL])
    db.execute(QC_ITEMS_ANY_RATING, [[row[0] for row in tasks.fetchall()]])


def _reset_load(db: Any) -> None:
    """Put the load generation back to all-open so runs are comparable."""
    g = f"(SELECT id FROM labeling_generation WHERE number = {LOAD_GENERATION})"
    a = f"(SELECT a.id FROM labeling_assignment a JOIN labeling_task t ON t.id = a.task_id WHERE t.generation_id = {g})"
    s = f"(SELECT id FROM labeling_labeledstep WHERE assignment_id IN {a})"
    db.execute(f"DELETE FROM labeling_steprating WHERE step_id IN {s}")
    db.execute(f"DELETE FROM labeling_labeledstep WHERE assignment_id IN {a}")
    db.execute(f"DELETE FROM labeling_assignment WHERE id IN {a}")
    db.execute(f"UPDATE labeling_task SET status = 'open' WHERE generation_id = {g} AND status <> 'open'")
    db.execute("DELETE FROM django_session")
    db.execute("VACUUM ANALYZE labeling_assignment")


def stored_ratings(url: str) -> int:
    with _connect(url) as db:
        row = db.execute(
            f"""SELECT count(*) FROM labeling_steprating r JOIN labeling_labeledstep s ON s.id = r.step_id
                JOIN labeling_assignment a ON a.id = s.assignment_id JOIN labeling_task t ON t.id = a.task_id
                JOIN labeling_generation g ON g.id = t.generation_id
                WHERE g.number = {LOAD_GENERATION} AND r.rating IS NOT NULL"""
        ).fetchone()
    return int(row[0])


# --- server -----------------------------------------------------------------
def make_sessions(first: int, count: int) -> list[dict[str, str]]:
    """Signed-in sessions made directly, so PBKDF2 sign-ins do not swamp the run.

    Sign-in itself is measured once per run ("login", a handful of users)."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.utils.crypto import get_random_string

    # The configured engine (database, or Redis written through to the database).
    SessionStore = import_module(settings.SESSION_ENGINE).SessionStore

    users = {u.username: u for u in User.objects.filter(username__in=[f"bench{first + i}" for i in range(count)])}
    # Simulated labelers are active (past screening): they get normal work.
    from labeling.models import Labeler, LabelerStatus

    have = set(Labeler.objects.filter(user__in=users.values()).values_list("user_id", flat=True))
    Labeler.objects.bulk_create(
        Labeler(user=u, status=LabelerStatus.ACTIVE) for u in users.values() if u.pk not in have
    )
    Labeler.objects.filter(user__in=users.values()).update(status=LabelerStatus.ACTIVE)
    cookies = []
    for i in range(count):
        user = users[f"bench{first + i}"]
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        store[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]  # as a sign-in would
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()
        store.create()
        cookies.append({"sessionid": store.session_key or "", "csrftoken": get_random_string(32)})
    return cookies


def server_env(args: argparse.Namespace, env: dict[str, str], app: str) -> dict[str, str]:
    """The product (with the cost probe), the floor or the baseline; ``application_name`` tells their backends apart.

    The baseline is the product as another checkout has it (``--baseline``):
    its own settings and code, served from its directory.
    """
    settings_module = {"product": "benchmarks.serving.product_settings", "floor": "benchmarks.serving.floor_settings",
                       "baseline": "benchmarks.serving.product_settings"}  # fmt: skip
    sep = "&" if "?" in args.database_url else "?"
    return {**env, "DJANGO_SETTINGS_MODULE": settings_module[app],
            "DATABASE_URL": f"{args.database_url}{sep}application_name=bench-{app}"}  # fmt: skip


def _port_free(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_server(args: argparse.Namespace, env: dict[str, str], app: str = "product") -> subprocess.Popen[bytes]:
    port = args.port if app == "product" else args.port + 1
    # Whoever already listens there would answer the readiness check below, and
    # the run would measure the CPU of a server that serves nothing.
    if not _port_free(port):
        raise SystemExit(f"port {port} ({app}) is in use: stop what listens there, or pass another --port")
    root = Path(args.baseline).resolve() if app == "baseline" else ROOT
    if app != "floor":
        static = {**env, "STATIC_ROOT": tempfile.mkdtemp(prefix=f"bench-static-{app}-")}
        subprocess.run([PY, "manage.py", "collectstatic", "--no-input", "-v", "0"], cwd=root, env=static, check=True)
        env = static
    server = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "gunicorn"), "annotate.wsgi", "-w", str(args.workers),
         "--worker-class", "gthread", "--threads", str(args.threads),
         "--keep-alive", str(getattr(args, "keep_alive", KEEP_ALIVE_S)), "-b", f"127.0.0.1:{port}",
         "--access-logfile", "-" if args.access_log else "/dev/null",
         "--log-level", "warning", "--backlog", "2048"],
        cwd=root, env=server_env(args, env, app),
    )  # fmt: skip
    for _ in range(100):
        if server.poll() is not None:
            raise SystemExit(f"gunicorn ({app}) exited with {server.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/login/")
            if conn.getresponse().status == 200:
                return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit(f"gunicorn ({app}) did not come up")


# --- simulated labelers ------------------------------------------------------
_STATE_VERSION = re.compile(r'id="task-state"[^>]*\bdata-version="(\d+)"')


def _state_version(page: str) -> int:
    """The state version a task page (or panel) shows: what the page's key presses are aimed at."""
    match = _STATE_VERSION.search(page)
    return int(match.group(1)) if match else 0


class Labeler:
    def __init__(self, port: int, cookies: dict[str, str], stats: dict[str, list[float]], lock: threading.Lock,
                 costs: dict[str, list[list[int]]] | None = None, rate_via: str = "presses") -> None:  # fmt: skip
        self.rate_via = rate_via
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.cookies, self.stats, self.lock = dict(cookies), stats, lock
        self.costs = costs if costs is not None else defaultdict(list)
        self.acked = 0
        self.unanswered_ratings = 0  # sent, no answer (timed out): stored or not, never acknowledged
        self.errors = 0
        self.http_errors = 0
        # Set to end the run before its deadline (benchmarks/labeling_campaign.py: once enough tasks are finished).
        self.stop = threading.Event()
        # (assignment, step) where a stopped run left its task: the next run, handed the same task back by
        # /next/, goes on from there, as a returning labeler does (re-rating a step would be acknowledged
        # twice and stored once).
        self.left_at: tuple[int, int] | None = None

    def request(self, label: str, method: str, path: str, body: dict[str, Any] | None = None,
                htmx: bool = False, as_json: bool = False) -> tuple[int, dict[str, str], str]:  # fmt: skip
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        data = None
        if body is not None:
            if as_json:
                data = json.dumps(body)
                headers["Content-Type"] = "application/json"
                headers["Accept"] = "application/json"
            else:
                data = urllib.parse.urlencode(body)
                headers["Content-Type"] = "application/x-www-form-urlencoded"
            headers["X-CSRFToken"] = self.cookies.get("csrftoken", "")
            headers["Referer"] = "http://127.0.0.1/"
        if htmx:
            headers["HX-Request"] = "true"
        t0 = time.perf_counter()
        try:
            self.conn.request(method, path, body=data, headers=headers)
            response = self.conn.getresponse()
            text = response.read().decode()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.errors += 1
            if label == "rate":
                self.unanswered_ratings += 1
            return 0, {}, ""
        elapsed = (time.perf_counter() - t0) * 1000
        cost = response.headers.get(COST_HEADER)
        with self.lock:
            self.stats[label].append(elapsed)
            if cost:
                self.costs[label].append([int(kv.partition("=")[2]) for kv in cost.split(";")])
        for value in response.headers.get_all("Set-Cookie") or []:
            k, _, rest = value.partition("=")
            self.cookies[k] = rest.split(";", 1)[0]
        if response.status >= 400:
            self.errors += 1
            self.http_errors += 1
        return response.status, dict(response.headers), text

    def sign_in(self, name: str) -> None:
        self.cookies = {}
        self.request("login_form", "GET", "/login/")
        status, _, _ = self.request("login", "POST", "/login/", {"username": name, "password": PASSWORD})
        if status != 302:
            raise RuntimeError(f"sign-in failed for {name}: {status}")

    def run(self, deadline: float, think: tuple[float, float] | None, n_steps: int, start_after: float) -> None:
        time.sleep(start_after)  # labelers arrive over the ramp-up, not all in one instant
        status, headers, _ = self.request("next", "POST", "/next/", {})
        match = re.search(r"/assignments/(\d+)/", headers.get("Location", ""))
        assignment = int(match.group(1)) if match else None
        if assignment is None:
            return
        # The browser follows the redirect to the task page once; after that,
        # finishing a task answers with the next one's panel (htmx swaps it in).
        status, _, page = self.request("task_page", "GET", f"/assignments/{assignment}/")
        if status != 200:
            return
        version = _state_version(page)
        first = self.left_at[1] if self.left_at and self.left_at[0] == assignment else 0
        self.left_at = None
        while assignment is not None and time.monotonic() < deadline and not self.stop.is_set():
            for i in range(first, n_steps):
                if time.monotonic() >= deadline or self.stop.is_set():
                    self.left_at = (assignment, i)
                    return
                if think:
                    time.sleep(random.uniform(*think))
                rating = -1 if random.random() < 0.15 else random.choice([0, 1, 1, 1])
                if self.rate_via == "presses":
                    # What the browser sends (static/js/press-queue.js): a batch
                    # of one press aimed at the state version shown.
                    status, _, text = self.request(
                        "rate", "POST", f"/assignments/{assignment}/presses/",
                        {"presses": [{"step": i, "completion": 0, "version": version, "rating": rating}]},
                        as_json=True,
                    )  # fmt: skip
                    if status == 200:
                        version = int(json.loads(text)["version"])
                else:
                    status, _, _ = self.request(
                        "rate", "POST", f"/assignments/{assignment}/steps/{i}/0/",
                        {"rating": "", "set_rating": rating, "flagged": "0", "version": i + 1}, htmx=True,
                    )  # fmt: skip
                if status == 200:
                    self.acked += 1
                if rating == -1:
                    break
            first = 0
            if think:
                time.sleep(random.uniform(*think))
            status, _, text = self.request(
                "submit+next", "POST", f"/assignments/{assignment}/submit/", {"version": version}, htmx=True
            )
            match = re.search(r'data-assignment="(\d+)"', text)
            assignment = int(match.group(1)) if match else None
            version = _state_version(text)


def drive(
    port: int,
    sessions: list[dict[str, str]],
    duration: float,
    think: tuple[float, float] | None,
    n_steps: int,
    spawn_rate: float,
    out: Any,
    sign_in: bool = True,
    rate_via: str = "presses",
) -> None:
    """Runs in its own process: one thread per labeler."""
    stats: dict[str, list[float]] = defaultdict(list)
    lock = threading.Lock()
    # Measure the real sign-in a few times (PBKDF2 by design, so not for all).
    costs: dict[str, list[list[int]]] = defaultdict(list)
    if sign_in:
        probe = Labeler(port, {}, stats, lock)
        for i in range(3):
            probe.sign_in(f"bench{i}")
    labelers = [Labeler(port, cookies, stats, lock, costs, rate_via) for cookies in sessions]
    deadline = time.monotonic() + duration
    threads = [
        threading.Thread(target=lab.run, args=(deadline, think, n_steps, i / spawn_rate if spawn_rate else 0.0),
                         daemon=True)
        for i, lab in enumerate(labelers)
    ]  # fmt: skip
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration + 60)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.send({"stats": dict(stats), "costs": dict(costs), "acked": sum(x.acked for x in labelers),
              "unanswered_ratings": sum(x.unanswered_ratings for x in labelers),
              "errors": sum(x.errors for x in labelers),
              "http_errors": sum(x.http_errors for x in labelers), "wall": time.perf_counter() - t0,
              "generator_cpu": usage.ru_utime + usage.ru_stime})  # fmt: skip


CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float | None:
    """utime + stime of one process in seconds (/proc/<pid>/stat fields 14 and 15); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class CpuMeter:
    """CPU of one server over a run: its gunicorn tree and its own PostgreSQL backends, nothing else.

    The backends are the rows of pg_stat_activity for the benchmark database
    with the server's application_name, sampled every ``interval`` seconds
    during the run (persistent connections, so the set barely changes). A
    process seen first after the start counts from zero; one that ends during
    the run counts up to its last sample (CONN_MAX_AGE recycles a backend at
    most once a minute, so that loses at most ``interval`` of its CPU).
    Autovacuum, the WAL writer, other databases and other users' backends are
    not counted: they were, before, and inflated the server's figure.
    """

    def __init__(self, server_pid: int, url: str, app_name: str, interval: float = 0.5) -> None:
        self.server_pid, self.url, self.app_name, self.interval = server_pid, url, app_name, interval
        self.first: dict[tuple[str, int], float] = {}
        self.last: dict[tuple[str, int], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _pids(self, db: Any) -> list[tuple[str, int]]:
        import psutil

        root = psutil.Process(self.server_pid)
        app = [("app", p.pid) for p in [root, *root.children(recursive=True)]]
        rows = db.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [self.app_name],
        ).fetchall()
        return app + [("pg", int(r[0])) for r in rows]

    def _sample(self, db: Any, *, initial: bool) -> None:
        for key in self._pids(db):
            cpu = _proc_cpu(key[1])
            if cpu is None:
                continue
            if key not in self.first:
                self.first[key] = cpu if initial else 0.0
            self.last[key] = cpu

    def _run(self) -> None:
        with _connect(self.url) as db:
            self._sample(db, initial=True)
            self._ready.set()
            while not self._stop.wait(self.interval):
                self._sample(db, initial=False)
            self._sample(db, initial=False)

    def __enter__(self) -> CpuMeter:
        self._ready = threading.Event()
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def seconds(self, kind: str) -> float:
        # A copy: read during the run too (benchmarks/labeling_campaign.py), while the sampler adds processes.
        return sum(last - self.first[k] for k, last in list(self.last.items()) if k[0] == kind)


def run_load(args: argparse.Namespace, labelers: int, duration: float, think: tuple[float, float] | None,
             first: int = 0, app: str = "product") -> dict[str, Any]:  # fmt: skip
    sessions = make_sessions(first, labelers)
    receive, send = multiprocessing.Pipe(duplex=False)
    port = args.port if app == "product" else args.port + 1
    process = multiprocessing.Process(
        target=drive,
        args=(port, sessions, duration, think, args.steps, args.spawn_rate, send, app != "floor", args.rate_via),
    )
    load_before = os.getloadavg()
    with CpuMeter(args.server_pids[app], args.database_url, f"bench-{app}") as meter:
        process.start()
        result: dict[str, Any] = receive.recv()
        process.join()
    result["app_cpu"], result["pg_cpu"] = meter.seconds("app"), meter.seconds("pg")
    result["load_before"], result["load_after"] = load_before, os.getloadavg()
    return result


def _check(result: dict[str, Any], stored: int) -> str:
    """Every acknowledged rating is stored; a rating whose answer never came (client timeout) may be stored too."""
    acked, unanswered = result["acked"], result.get("unanswered_ratings", 0)
    ok = acked == stored or (unanswered and acked <= stored <= acked + unanswered)
    return (f"ratings acknowledged {acked}, stored {stored}"
            + (f" ({unanswered} sent without an answer)" if unanswered else "")
            + f": {'OK' if ok else 'MISMATCH'}")  # fmt: skip


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def report(title: str, result: dict[str, Any]) -> dict[str, Any]:
    wall = result["wall"]
    before, after = result["load_before"], result["load_after"]
    print(f"\n== {title}: {wall:.0f} s, errors {result['errors']}; load average {before[0]:.2f} before,"
          f" {after[0]:.2f} after ({os.cpu_count()} cores)")  # fmt: skip
    print(f"{'endpoint':<14}{'count':>8}{'req/s':>8}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}"
          f"{'trips':>7}{'stmts':>7}{'app ms':>8}{'pg ms':>7}")  # fmt: skip
    summary: dict[str, Any] = {}
    for name, values in sorted(result["stats"].items()):
        rate = len(values) / wall
        row = {"count": len(values), "rps": rate, "p50": statistics.median(values),
               "p95": pct(values, 95), "p99": pct(values, 99)}  # fmt: skip
        costs = result.get("costs", {}).get(name)
        if costs:
            # q, tx, ping, app_us, pg_us, trips per request (benchmarks.serving.probe).
            mean = [statistics.fmean(c[i] for c in costs) for i in range(6)]
            row.update(statements=mean[0], round_trips=mean[5], app_ms=mean[3] / 1000, pg_ms=mean[4] / 1000)
        summary[name] = row
        extra = (f"{row['round_trips']:>7.1f}{row['statements']:>7.1f}{row['app_ms']:>8.2f}{row['pg_ms']:>7.2f}"
                 if costs else "")  # fmt: skip
        print(f"{name:<14}{row['count']:>8}{rate:>8.1f}{row['p50']:>8.1f}{row['p95']:>8.1f}{row['p99']:>8.1f}{extra}")
    total = sum(len(v) for v in result["stats"].values())
    print(f"throughput: {total / wall:.1f} requests/s, {result['acked'] / wall:.1f} ratings/s")
    per = 1000 / max(total, 1)
    print(f"CPU per request: app (gunicorn tree) {per * result['app_cpu']:.2f} ms + its PostgreSQL backends"
          f" {per * result['pg_cpu']:.2f} ms = {per * (result['app_cpu'] + result['pg_cpu']):.2f} ms"
          f" ({100 * (result['app_cpu'] + result['pg_cpu']) / wall:.0f}% of one core);"
          f" load generator {100 * result['generator_cpu'] / wall:.0f}% of one core")  # fmt: skip
    summary["cpu"] = {"generator_s": result["generator_cpu"], "app_s": result["app_cpu"], "pg_s": result["pg_cpu"],
                      "app_ms_per_request": per * result["app_cpu"], "pg_ms_per_request": per * result["pg_cpu"],
                      "server_ms_per_request": per * (result["app_cpu"] + result["pg_cpu"])}  # fmt: skip
    summary["load"] = {"before": before[0], "after": after[0]}
    return summary


SOAK_FAILURE_RATIO = 0.01
SOAK_P95_MS = 25.0


def soak_verdict(result: dict[str, Any], summary: dict[str, Any], stored: int) -> list[tuple[str, bool, str]]:
    """(criterion, passed, detail) for the soak's acceptance criteria."""
    answered = sum(len(v) for v in result["stats"].values())
    # Errors = answers >= 400 plus requests that got no answer at all (not in stats).
    unanswered = max(0, result["errors"] - result.get("http_errors", 0))
    attempts = answered + unanswered
    ratio = result["errors"] / max(attempts, 1)
    verdicts = [
        (
            "failure ratio < 1%",
            ratio < SOAK_FAILURE_RATIO,
            f"{result['errors']} failed of {attempts} requests ({100 * ratio:.3f}%)",
        )
    ]
    for name, label in (("rate", "rate"), ("submit+next", "next task (submit+next)"), ("next", "next task (first)")):
        row = summary.get(name)
        if row is None:
            verdicts.append((f"p95 {label} < {SOAK_P95_MS:.0f} ms", False, "no requests measured"))
            continue
        verdicts.append(
            (f"p95 {label} < {SOAK_P95_MS:.0f} ms", row["p95"] < SOAK_P95_MS,
             f"p95 {row['p95']:.1f} ms (p50 {row['p50']:.1f}, p99 {row['p99']:.1f}, n={row['count']})")
        )  # fmt: skip
    verdicts.append(
        ("stored ratings == acknowledged", stored == result["acked"],
         f"acknowledged {result['acked']}, stored {stored}")
    )  # fmt: skip
    return verdicts


def compare(args: argparse.Namespace, steps: list[int], think: tuple[float, float]) -> None:
    """Product and floor (or the baseline) in alternating runs on one database (reset before each); medians, ratios."""
    other = "baseline" if args.baseline else "floor"
    loads: list[tuple[str, int | None]] = []
    if args.mode in ("think", "both"):
        loads.append((f"{args.labelers} labelers, think {think[0]:g}-{think[1]:g} s", None))
    if args.mode in ("closed", "both"):
        loads += [(f"closed loop, {c} labelers", c) for c in steps]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in range(args.rounds):
        for load, concurrency in loads:
            # Alternate which goes first, so neither always follows the other.
            for app in ("product", other) if r % 2 == 0 else (other, "product"):
                with _connect(args.database_url) as db:
                    _reset_load(db)
                before = stored_ratings(args.database_url)
                labelers = args.labelers if concurrency is None else concurrency
                result = run_load(args, labelers, args.duration, None if concurrency else think, app=app)
                summary = report(f"round {r + 1}, {app}: {load}", result)
                stored = stored_ratings(args.database_url) - before
                print(_check(result, stored))
                summary["stored_ok"] = _check(result, stored).endswith("OK")
                summary["errors"] = result["errors"]
                runs[(load, app)].append(summary)

    def med(app_runs: list[dict[str, Any]], *path: str) -> float:
        values = []
        for run in app_runs:
            value: Any = run
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None:
                values.append(float(value))
        return statistics.median(values) if values else float("nan")

    print(f"\n== product / {other}, medians of {args.rounds} alternating runs each")
    for load, _ in loads:
        product, floor = runs[(load, "product")], runs[(load, other)]
        loads_seen = [run["load"]["before"] for run in product + floor]
        print(f"\n{load} (load average {min(loads_seen):.2f}-{max(loads_seen):.2f} before the runs;"
              f" errors {sum(r['errors'] for r in product)} / {sum(r['errors'] for r in floor)};"
              f" stored == acknowledged in {sum(r['stored_ok'] for r in product + floor)} of"
              f" {len(product + floor)} runs)")  # fmt: skip
        print(f"{'':<34}{'product':>10}{other:>10}{'ratio':>8}")
        rows = [
            (f"{name} {key}", (name, key))
            for name in ("rate", "submit+next")
            for key in ("p50", "p95", "p99", "rps", "round_trips", "app_ms", "pg_ms")
        ] + [
            ("CPU/request app (gunicorn tree) ms", ("cpu", "app_ms_per_request")),
            ("CPU/request PostgreSQL ms", ("cpu", "pg_ms_per_request")),
            ("CPU/request total ms", ("cpu", "server_ms_per_request")),
        ]
        for label, path in rows:
            p, f = med(product, *path), med(floor, *path)
            print(f"{label:<34}{p:>10.2f}{f:>10.2f}{p / f if f else float('nan'):>8.2f}")


def think_range(parser: argparse.ArgumentParser, flag: str, value: str) -> tuple[float, float]:
    """``LOW,HIGH`` seconds between clicks, or the parser's error naming the flag."""
    try:
        low, high = (float(x) for x in value.split(","))
    except ValueError:
        parser.error(f"{flag} {value!r}: expected two numbers of seconds, LOW,HIGH (e.g. 1,5)")
    if not 0 <= low <= high:
        parser.error(f"{flag} {value!r}: expected 0 <= LOW <= HIGH")
    return low, high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/annotate_bench_load")
    parser.add_argument("--solutions", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=10, help="steps per solution (history labels = solutions*steps)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild even if the database exists")
    parser.add_argument("--mode", choices=["think", "closed", "both"], default="think")
    parser.add_argument("--labelers", type=int, default=200)
    parser.add_argument("--think", default="1,5", help="think time range in seconds")
    parser.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    parser.add_argument("--duration", type=float, default=60, help="seconds per mode (closed: split over steps)")
    parser.add_argument(
        "--workers", type=int, default=4 * (os.cpu_count() or 2),
        help="gunicorn worker processes (default 4 per core: requests mostly wait on PostgreSQL)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=1,
        help="threads per worker (threads of one process queue on the GIL after every query)",
    )  # fmt: skip
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--rate-via", choices=["presses", "form"], default="presses",
        help="presses: the JSON key-press batches the browser sends (one press each); form: the no-JS form post",
    )  # fmt: skip
    parser.add_argument(
        "--spawn-rate", type=float, default=10.0,
        help="labelers starting per second (as Locust's -r); 0 starts all at once",
    )  # fmt: skip
    parser.add_argument(
        "--cache-url", default="redis://127.0.0.1:6379/11",
        help="CACHE_URL of the server (production: Redis; sessions are read from it)",
    )  # fmt: skip
    parser.add_argument("--access-log", action="store_true")
    parser.add_argument("--soak", action="store_true", help="think mode, 600 s by default, PASS/FAIL per criterion")
    parser.add_argument(
        "--max-load", type=float, default=1.0,
        help="quiet-machine check of the soak: refuse to start while the 1-minute load average is above this",
    )  # fmt: skip
    parser.add_argument("--busy-ok", action="store_true", help="soak on a busy machine anyway (the verdict says so)")
    parser.add_argument(
        "--floor", action="store_true",
        help="alternate runs of the product and the floor (benchmarks/serving/floor.py); report medians and ratios",
    )  # fmt: skip
    parser.add_argument(
        "--baseline", metavar="CHECKOUT",
        help="as --floor, against the product served from another checkout (e.g. a git worktree of an older commit,"
             " with its front-end assets installed): the same load, alternating, medians and ratios",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="with --floor or --baseline: runs of each")
    args = parser.parse_args()
    if args.soak:
        args.mode = "think"
        if "--duration" not in sys.argv:
            args.duration = 600
    steps = [int(c) for c in args.concurrency.split(",")]
    args.max_labelers = max([args.labelers, *steps]) * 2

    env = {**os.environ, "DATABASE_URL": args.database_url, "SECRET_KEY": "benchmark-only-secret-key-0123456789",
           "DEBUG": "false", "SECURE_COOKIES": "false", "STATIC_ROOT": tempfile.mkdtemp(prefix="bench-static-"),
           "DJANGO_SETTINGS_MODULE": "annotate.settings", "LOG_LEVEL": "WARNING",
           "CACHE_URL": args.cache_url}  # fmt: skip
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    build(args, env)
    if args.soak:
        load = os.getloadavg()[0]
        if load > args.max_load and not args.busy_ok:
            raise SystemExit(
                f"load average {load:.2f} > --max-load {args.max_load}: the soak needs a quiet machine"
                " (--busy-ok runs it anyway and says so in the verdict)"
            )
    if args.floor and args.baseline:
        raise SystemExit("--floor and --baseline: one at a time")
    apps = ["product", "floor"] if args.floor else ["product", "baseline"] if args.baseline else ["product"]
    servers: dict[str, subprocess.Popen[bytes]] = {}
    results: dict[str, Any] = {}
    soak_failed = False
    lo, hi = think_range(parser, "--think", args.think)
    try:
        # Inside the try: a server that fails to start stops the ones started before it.
        for app in apps:
            servers[app] = start_server(args, env, app)
        args.server_pids = {app: server.pid for app, server in servers.items()}
        if args.floor or args.baseline:
            compare(args, steps, (lo, hi))
            return
        if args.mode in ("think", "both"):
            before = stored_ratings(args.database_url)
            result = run_load(args, args.labelers, args.duration, (lo, hi))
            results["think"] = report(f"{args.labelers} labelers, think {lo}-{hi} s", result)
            stored = stored_ratings(args.database_url) - before
            print(_check(result, stored))
            if args.soak:
                verdicts = soak_verdict(result, results["think"], stored)
                load = result["load_before"][0]
                quiet = "quiet" if load <= args.max_load else f"BUSY (load {load:.2f} > {args.max_load}, --busy-ok)"
                print(f"\n== soak: {args.labelers} labelers, {args.duration:.0f} s, machine {quiet}")
                for criterion, passed, detail in verdicts:
                    print(f"{'PASS' if passed else 'FAIL'}  {criterion}: {detail}")
                soak_failed = not all(passed for _, passed, _ in verdicts)
                print(f"SOAK {'FAIL' if soak_failed else 'PASS'}")
        if args.mode in ("closed", "both"):
            results["closed"] = {}
            per_step = args.duration / len(steps)
            first = 0
            for c in steps:
                before = stored_ratings(args.database_url)
                result = run_load(args, c, per_step, None, first=first)
                first += c  # fresh labelers each step
                first %= args.max_labelers - c
                summary = report(f"closed loop, {c} concurrent labelers", result)
                stored = stored_ratings(args.database_url) - before
                print(_check(result, stored))
                results["closed"][c] = summary
                p95 = max(summary.get("rate", {}).get("p95", 0), summary.get("submit+next", {}).get("p95", 0))
                for name in ("rate", "submit+next"):
                    if name in summary:
                        summary[name]["concurrency"] = c
                if p95 > 100:
                    print(f"p95 crossed 100 ms at {c} concurrent labelers")
                    break
    finally:
        for server in servers.values():
            server.send_signal(signal.SIGTERM)
        for server in servers.values():
            server.wait(30)
    if soak_failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
