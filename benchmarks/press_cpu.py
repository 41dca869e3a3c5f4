"""App CPU of one key press in one process, with and without PostgreSQL's pipeline mode, and where it goes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/annotate_prof CACHE_URL=redis://127.0.0.1:6379/9 \\
      DEBUG=false SECRET_KEY=... .venv/bin/python benchmarks/press_cpu.py [--rounds 8] [--presses 200] \\
      [--profile [--sort tottime] [--lines 60] [--dump FILE]]
      [--submit | --panel | --qc-lookup | --qc-scoring | --pg-statements] [--history N] [--qc-window N]

Run it on a copy of the benchmark database (``createdb -T annotate_bench_hotpath
annotate_prof``): it signs up a labeler, takes a task and rates its first step
again and again through ``/assignments/<pk>/presses/`` with Django's test
client (no HTTP server, no other process). Each round measures the CPU of
this thread (``time.thread_time``) per press, alternating ``pipelined()`` on
and replaced by a no-op; medians and every round are printed. ``--profile``
then prints a cProfile of the pipelined press on the same clock.

``--panel`` measures rendering the task panel of a fresh task (what submit
+ next answers with) and its step rows alone, outside any request
(``--profile``: then profiles the panel).
``--qc-scoring`` (with ``--qc-window N``) measures scoring that window
(``labeling.quality.control.window_quality``, on about one hand-out in ten)
against the ORM queries of ``gold_outcomes`` that scored it before.
``--qc-lookup`` measures the unseen-QC lookup a hand-out makes on a QC draw
(10 % of them), ``hotpath.QUALITY_CONTROL_UNSEEN``, alternating with the
ORM query it replaced (kept here as the reference); both print app and
PostgreSQL CPU.
``--submit`` measures submit + next instead: each task's steps are rated in
one batch of presses (not timed), then ``/assignments/<pk>/submit/`` finishes
it and answers with the next task's panel (timed, and profiled with
``--profile``), as the load generator's submit does. ``--sections`` then
times its parts (SECTIONS) on the thread's clock, without a profiler.
``--pg-statements`` measures PostgreSQL's side instead: the CPU its backend
spends on each statement of a key press and of a submit + next, read from
``/proc/<pid>/schedstat`` before and after each statement (so PostgreSQL
must run on this machine), with the pipeline off so that each statement is
done when its execute returns; medians over ``--presses`` of each, and the
median whole request. ``--history N``: the measuring labeler starts with N
finished assignments (taken over from one of the benchmark's history
labelers, who have 1,000 each), as a labeler some weeks in; reads of a
labeler's history show their cost only then. ``--qc-window N``: they also
have N checked QC items, all passed (gold solutions that accept any rating),
so their hand-outs judge a full rolling window (QC_MIN_ITEMS or more), as
everyone's does after their first hundred tasks or so; the load benchmark's
labelers never get there (its database has no QC items).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8, help="rounds of each mode, alternating")
    parser.add_argument("--presses", type=int, default=200, help="key presses per round")
    parser.add_argument("--profile", action="store_true", help="then profile --presses pipelined presses")
    parser.add_argument("--sort", default="cumulative", help="the profile's order (pstats: cumulative, tottime, ...)")
    parser.add_argument("--lines", type=int, default=40, help="how many lines of the profile to print")
    parser.add_argument("--dump", help="also write the profile to this file (pstats format)")
    parser.add_argument("--panel", action="store_true", help="measure rendering the fresh task panel alone")
    parser.add_argument("--submit", action="store_true", help="measure submit + next instead of a key press")
    parser.add_argument("--sections", action="store_true", help="with --submit: then its CPU by part, timed")
    parser.add_argument("--qc-lookup", action="store_true", help="measure the unseen-QC lookup against its ORM form")
    parser.add_argument("--qc-scoring", action="store_true",
                        help="with --qc-window: measure scoring that window against its ORM form")  # fmt: skip
    parser.add_argument("--pg-statements", action="store_true", help="PostgreSQL's CPU per statement of each request")
    parser.add_argument("--history", type=int, default=0, help="the labeler starts with this many finished tasks")
    parser.add_argument("--qc-window", type=int, default=0, help="and with this many checked QC items, all passed")
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client

    import labeling.work.rating as rating
    from labeling.models import Assignment, AssignmentStatus, Labeler, LabelerStatus

    if connection.vendor != "postgresql":
        sys.exit("press_cpu: DATABASE_URL must name a PostgreSQL copy of the benchmark database")
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    user = User.objects.create_user(username=f"press-cpu-{uuid.uuid4().hex[:8]}", password=uuid.uuid4().hex)
    labeler = Labeler.objects.create(user=user, status=LabelerStatus.ACTIVE)
    if args.history:
        # A labeler some weeks in: they take over finished assignments of one
        # of the benchmark's history labelers (this is a copy of its database).
        with connection.cursor() as cursor:
            cursor.execute(
                """UPDATE labeling_assignment SET labeler_id = %s WHERE id IN (
                       SELECT id FROM labeling_assignment WHERE status = 'submitted' AND labeler_id = (
                           SELECT labeler_id FROM labeling_assignment WHERE status = 'submitted'
                           GROUP BY labeler_id ORDER BY count(*) DESC LIMIT 1)
                       LIMIT %s)""",
                [labeler.pk, args.history],
            )
            cursor.execute("ANALYZE labeling_assignment")
    if args.qc_window:
        _qc_window(labeler.pk, args.qc_window)
    client = Client()
    client.force_login(user)
    client.post("/next/")
    assignment = Assignment.objects.get(labeler=labeler, status=AssignmentStatus.IN_PROGRESS)
    version = assignment.version

    def press(i: int) -> None:
        nonlocal version
        body = {"presses": [{"step": 0, "completion": 0, "version": version, "rating": i % 2}]}
        response = client.post(
            f"/assignments/{assignment.pk}/presses/", data=json.dumps(body), content_type="application/json"
        )
        if response.status_code != 200:
            sys.exit(f"press_cpu: the press answered {response.status_code}: {response.content[:200]!r}")
        version = response.json()["version"]

    if args.submit:
        _submits(client, labeler, args)
        return
    if args.panel:
        _panels(assignment, args)
        return
    if args.qc_lookup:
        _qc_lookups(labeler.pk, args)
        return
    if args.qc_scoring:
        _qc_scorings(labeler, args)
        return
    if args.pg_statements:
        _pg_statements(client, labeler, assignment, args)
        return
    for i in range(50):  # warm: connections, caches, the templates
        press(i)
    cpu: dict[str, list[float]] = {"pipelined": [], "plain": []}
    for r in range(args.rounds):
        for mode in ("pipelined", "plain") if r % 2 else ("plain", "pipelined"):
            # The services' pipelined() (labeling.work.hotpath), or nothing in its place.
            off = mock.patch.object(rating, "pipelined", contextlib.nullcontext)
            with off if mode == "plain" else contextlib.nullcontext():
                start = time.thread_time()
                for i in range(args.presses):
                    press(i)
                cpu[mode].append((time.thread_time() - start) / args.presses * 1000)
    for mode, values in cpu.items():
        rounds = " ".join(f"{v:.2f}" for v in values)
        print(f"{mode:<10} app CPU per key press: median {statistics.median(values):.3f} ms (rounds: {rounds})")
    print(f"pipelined / plain: {statistics.median(cpu['pipelined']) / statistics.median(cpu['plain']):.3f}")

    if args.profile:
        profile = cProfile.Profile(time.thread_time)
        profile.enable()
        for i in range(args.presses):
            press(i)
        profile.disable()
        _report(profile, args)


def _qc_window(labeler_id: int, items: int) -> None:
    # A labeler past their first hundred tasks: a full rolling QC window,
    # which every hand-out of theirs judges (labeler_quality_enforce). Some
    # finished assignments of the benchmark's history are made theirs and
    # their tasks QC items that any rating passes, so the labeler passes
    # (this is a copy of the benchmark's database).
    from django.db import connection

    from benchmarks.labeling_load import QC_ITEMS_ANY_RATING

    with connection.cursor() as cursor:
        cursor.execute(
            """WITH picked AS (SELECT id FROM labeling_assignment WHERE status = 'submitted'
                                 AND task_kind = 'normal' AND labeler_id <> %s ORDER BY id DESC LIMIT %s)
               UPDATE labeling_assignment a SET labeler_id = %s, task_kind = 'quality_control'
               FROM picked WHERE a.id = picked.id RETURNING a.task_id""",
            [labeler_id, items, labeler_id],
        )
        cursor.execute(QC_ITEMS_ANY_RATING, [[row[0] for row in cursor.fetchall()]])


def _submits(client: Any, labeler: Any, args: argparse.Namespace) -> None:
    import re

    from labeling.models import Assignment, AssignmentStatus

    def current() -> tuple[int, int, int]:
        a = Assignment.objects.select_related("task__solution").get(
            labeler=labeler, status=AssignmentStatus.IN_PROGRESS
        )
        return a.pk, a.version, len(a.task.solution.steps)

    def submit(profile: cProfile.Profile | None = None, ready: Callable[[], None] | None = None) -> float:
        # The steps rated in one batch (not timed), then the submit (timed, and
        # profiled when given a profile; ``ready`` is called just before it).
        pk, version, steps = current()
        body = {"presses": [{"step": i, "completion": 0, "version": version + i, "rating": 1} for i in range(steps)]}
        response = client.post(f"/assignments/{pk}/presses/", data=json.dumps(body), content_type="application/json")
        if response.status_code != 200:
            sys.exit(f"press_cpu: the presses answered {response.status_code}: {response.content[:200]!r}")
        if ready is not None:
            ready()
        if profile is not None:
            profile.enable()
        start = time.thread_time()
        response = client.post(f"/assignments/{pk}/submit/", {"version": version + steps}, HTTP_HX_REQUEST="true")
        spent = time.thread_time() - start
        if profile is not None:
            profile.disable()
        if response.status_code != 200 or not re.search(rb'data-assignment="(\d+)"', response.content):
            sys.exit(f"press_cpu: the submit answered {response.status_code}: {response.content[:200]!r}")
        return spent

    for _ in range(20):  # warm
        submit()
    rounds = [statistics.median(submit() for _ in range(args.presses // 4)) * 1000 for _ in range(args.rounds)]
    print(f"app CPU per submit + next: median {statistics.median(rounds):.3f} ms "
          f"(rounds: {' '.join(f'{v:.2f}' for v in rounds)})")  # fmt: skip
    if args.profile:
        profile = cProfile.Profile(time.thread_time)
        for _ in range(args.presses // 4):
            submit(profile)
        _report(profile, args)
    if args.sections:
        _sections(lambda ready: submit(ready=ready), args.presses // 4)


# Where submit + next's app CPU goes, on the thread's own clock, without a
# profiler's cost per call (which inflates small functions several times
# over): (module, attribute as the caller looks it up, what it is), nested
# as they run. Each is wrapped in a timer for the measured submits.
SECTIONS = (
    ("labeling.web.views", "session_user", "the session (Redis) and the verified user"),
    ("labeling.web.views", "assignment_submit_and_next", "submit and hand-out, one transaction"),
    ("labeling.work.rating", "_submit_locked", "  submit: locks, reads, rules, finish"),
    ("labeling.work.rating", "assignment_lock_row_with_ratings", "    the locking read with the ratings"),
    ("labeling.work.rating", "assignment_finish", "    the finish"),
    ("labeling.work.rating", "assignment_next_in_transaction", "  hand-out"),
    ("labeling.work.queue", "labeler_quality_enforce", "    the rolling QC window judged"),
    ("labeling.work.queue", "_next_work", "    candidate, its places, the lease"),
    ("labeling.web.views", "next_after_finish", "the answer: the next task's screen"),
    ("labeling.web.respond", "task_panel_html", "  the panel's markup"),
    ("django.db.backends.utils", "CursorWrapper.execute", "statements sent (Django and psycopg), all"),
    ("psycopg.cursor", "Cursor.fetchone", "rows read (and pipeline answers awaited), all"),
)


def _sections(run: Callable[[Callable[[], None]], float], count: int) -> None:
    import importlib
    from collections import defaultdict

    spent: dict[str, int] = defaultdict(int)
    patches = []
    for module, attribute, name in SECTIONS:
        owner: Any = importlib.import_module(module)
        *path, leaf = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, leaf)

        def timed(*a: Any, _original: Any = original, _name: str = name, **k: Any) -> Any:
            start = time.thread_time_ns()
            try:
                return _original(*a, **k)
            finally:
                spent[_name] += time.thread_time_ns() - start

        patches.append(mock.patch.object(owner, leaf, timed))
    per_request: dict[str, list[int]] = defaultdict(list)
    whole: list[float] = []
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        for _ in range(count):
            whole.append(run(spent.clear))
            for _module, _attribute, name in SECTIONS:
                per_request[name].append(spent.get(name, 0))
    print(f"where it goes, medians (and means) of {count} (the whole request with these timers in: "
          f"{statistics.median(whole) * 1e6:.0f} us):")  # fmt: skip
    for _module, _attribute, name in SECTIONS:
        median, mean = statistics.median(per_request[name]) / 1000, statistics.mean(per_request[name]) / 1000
        print(f"{median:8.0f} us (mean {mean:6.0f})  {name}")


def _panels(assignment: Any, args: argparse.Namespace) -> None:
    from django.middleware.csrf import get_token
    from django.test import RequestFactory

    from labeling.web.panel import step_row_html, task_panel_html
    from labeling.work.selectors import task_screen_from

    screen = task_screen_from(assignment=assignment, ratings=[])
    request = RequestFactory().post("/")
    token = get_token(request)

    def panel() -> None:
        # As labeling.web.respond.task_response answers submit + next (htmx:
        # no CSRF fields, the page's header carries the token).
        task_panel_html(screen, csrf_token="", finished=True)

    def rows() -> None:
        for row in [*screen.rows, *screen.ahead]:
            step_row_html(row, screen=screen, csrf_token=token)

    for name, draw in (("task panel", panel), ("its step rows", rows)):
        for _ in range(50):  # warm: the templates
            draw()
        rounds = []
        for _ in range(args.rounds):
            start = time.thread_time()
            for _ in range(args.presses):
                draw()
            rounds.append((time.thread_time() - start) / args.presses * 1000)
        print(f"app CPU to render {name}: median {statistics.median(rounds):.3f} ms "
              f"(rounds: {' '.join(f'{v:.2f}' for v in rounds)})")  # fmt: skip
    if args.profile:
        profile = cProfile.Profile(time.thread_time)
        with profile:
            for _ in range(args.presses):
                panel()
        _report(profile, args)


def _qc_lookups(labeler_id: int, args: argparse.Namespace) -> None:
    from django.db.models import Exists, OuterRef

    from labeling.models import Assignment, GenerationStatus, GoldStep, Phase, Task, TaskKind, TaskStatus
    from labeling.work.hotpath import quality_control_unseen_ids

    def orm() -> list[int]:
        # The ORM form of the query that the raw statement replaced, kept as the baseline.
        return list(
            Task.objects.filter(
                kind=TaskKind.QUALITY_CONTROL, generation__status=GenerationStatus.OPEN, generation__phase=Phase.TWO
            )
            .exclude(status=TaskStatus.RETIRED)
            .filter(Exists(GoldStep.objects.filter(solution_id=OuterRef("solution_id"))))
            .exclude(Exists(Assignment.objects.filter(task_id=OuterRef("pk"), labeler_id=labeler_id)))
            .order_by("pk")
            .values_list("pk", flat=True)
        )

    def statement() -> list[int]:
        return quality_control_unseen_ids(labeler_id=labeler_id)

    if orm() != statement():
        sys.exit("press_cpu: the statement and its ORM form disagree")
    _forms_compared("an unseen-QC lookup", {"ORM query": orm, "statement": statement}, args, warm=50)


def _forms_compared(what: str, forms: dict[str, Callable[[], object]], args: argparse.Namespace, warm: int) -> None:
    # Two forms of one read, alternating (--rounds of --presses runs each,
    # after ``warm`` runs for the prepared statements): app CPU on the
    # thread's clock, PostgreSQL's from its backend's schedstat; medians.
    backend_ns = _backend_clock()
    for form in forms.values():
        for _ in range(warm):
            form()
    spent: dict[str, list[tuple[float, float]]] = {name: [] for name in forms}
    for _ in range(args.rounds):
        for name, form in forms.items():
            start, pg = time.thread_time(), backend_ns()
            for _ in range(args.presses):
                form()
            time.sleep(0.001)  # the backend's last microseconds reach schedstat
            spent[name].append(((time.thread_time() - start) / args.presses * 1e6,
                                (backend_ns() - pg) / args.presses / 1e3))  # fmt: skip
    print(f"{what}, medians of {args.rounds} rounds of {args.presses}:")
    for name, values in spent.items():
        app, pg = (statistics.median(v) for v in zip(*values, strict=True))
        print(f"  {name:<12} app CPU {app:6.0f} us, PostgreSQL CPU {pg:6.0f} us "
              f"(app rounds: {' '.join(f'{v[0]:.0f}' for v in values)})")  # fmt: skip


def _backend_clock() -> Callable[[], int]:
    """CPU nanoseconds of this connection's PostgreSQL backend so far (its /proc schedstat: same machine only)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]

    def backend_ns() -> int:
        with open(f"/proc/{pid}/schedstat") as stat:
            return int(stat.read().split()[0])

    return backend_ns


def _qc_scorings(labeler: Any, args: argparse.Namespace) -> None:
    # A changed rolling window scored (labeler_quality_enforce, about one
    # hand-out in ten): window_quality's three statements against the ORM
    # queries of gold_outcomes, which scored it before.
    from labeling.models import Assignment
    from labeling.quality.control import _rolling_window_ids, gold_outcomes, summarise, window_quality

    window = _rolling_window_ids(labeler=labeler)
    if len(window) < 10:
        sys.exit("press_cpu: --qc-scoring needs --qc-window 10 or more")

    def orm() -> Any:
        return summarise(gold_outcomes(Assignment.objects.filter(pk__in=window)))

    def statements() -> Any:
        return window_quality(window)

    if orm() != statements():
        sys.exit("press_cpu: the statements and the ORM queries judge the window differently")
    forms = {"ORM queries": orm, "statements": statements}
    _forms_compared(f"scoring a window of {len(window)} QC items", forms, args, warm=20)


def _pg_statements(client: Any, labeler: Any, assignment: Any, args: argparse.Namespace) -> None:
    from collections import defaultdict

    from django.db import connection

    import labeling.work.rating as rating
    from labeling.models import Assignment, AssignmentStatus

    backend_ns = _backend_clock()

    spent: list[tuple[str, int]] = []

    def measured(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        before = backend_ns()
        result = execute(sql, params, many, context)
        time.sleep(0.0005)  # the backend's last microseconds reach schedstat
        spent.append((" ".join(sql.split())[:90], backend_ns() - before))
        return result

    def post(path: str, **kwargs: Any) -> tuple[int, list[tuple[str, int]]]:
        spent.clear()
        with mock.patch.object(rating, "pipelined", contextlib.nullcontext), connection.execute_wrapper(measured):
            before = backend_ns()
            response = client.post(path, **kwargs)
            time.sleep(0.001)
            total = backend_ns() - before
        if response.status_code != 200:
            sys.exit(f"press_cpu: {path} answered {response.status_code}: {response.content[:200]!r}")
        return total, list(spent)

    def submit(_i: int) -> tuple[int, list[tuple[str, int]]]:
        a = Assignment.objects.select_related("task__solution").get(
            labeler=labeler, status=AssignmentStatus.IN_PROGRESS
        )
        steps = len(a.task.solution.steps)
        body = {"presses": [{"step": i, "completion": 0, "version": a.version + i, "rating": 1} for i in range(steps)]}
        client.post(f"/assignments/{a.pk}/presses/", data=json.dumps(body), content_type="application/json")
        return post(f"/assignments/{a.pk}/submit/", data={"version": a.version + steps}, HTTP_HX_REQUEST="true")

    version = assignment.version

    def press(i: int) -> tuple[int, list[tuple[str, int]]]:
        nonlocal version
        body = {"presses": [{"step": 0, "completion": 0, "version": version, "rating": i % 2}]}
        answer = post(f"/assignments/{assignment.pk}/presses/", data=json.dumps(body), content_type="application/json")
        version += 1
        return answer

    requests: list[tuple[str, Callable[[int], tuple[int, list[tuple[str, int]]]]]] = [
        ("key press", press),
        ("submit + next", submit),
    ]
    for name, request in requests:
        totals: list[int] = []
        per: dict[tuple[int, str], list[int]] = defaultdict(list)
        for i in range(args.presses + 10):
            total, statements = request(i)
            if i < 10:  # warm: the prepared statements
                continue
            totals.append(total)
            for n, (sql, ns) in enumerate(statements):
                per[(n, sql)].append(ns)
        print(f"{name}: PostgreSQL CPU, median {statistics.median(totals) / 1e3:.0f} us per request")
        for (_n, sql), values in sorted(per.items()):
            share = len(values) / len(totals)
            print(
                f"  {statistics.median(values) / 1e3:6.0f} us  {sql}"
                + (f"  ({share:.0%} of them)" if share < 1 else "")
            )
        if name == "key press":
            assignment.refresh_from_db()


def _report(profile: cProfile.Profile, args: argparse.Namespace) -> None:
    if args.dump:
        profile.dump_stats(args.dump)
    pstats.Stats(profile).sort_stats(args.sort).print_stats(args.lines)


if __name__ == "__main__":
    main()
