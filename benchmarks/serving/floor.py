"""The floor of the labeler workflow on the product's stack: what gunicorn, Django, psycopg and PostgreSQL cost.

The same URLs, database and sessions as the product, with the least work that
keeps a rating and a hand-out correct for the benchmark's labelers: a rating
is one statement (autocommit), submit + next three statements in one
transaction, and the fragments are f-strings, not templates. It leaves out
what the product's rules add (progress checks, alternatives, QC, screening,
stale-lease hand-over, quality checks, the user's password hash check), so
product / floor is the price of those rules plus whatever overhead the product
still carries. Served with ``DJANGO_SETTINGS_MODULE=benchmarks.serving.floor_settings``
by benchmarks/labeling_load.py (``--floor``); never part of the product.
"""

from __future__ import annotations

import html
import json
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils import timezone

from annotate.postgresql import prepared_cursor
from labeling.work.hotpath import TASK_CANDIDATE, task_candidate_params

OWNER = "(SELECT id FROM labeling_labeler WHERE user_id = %(user)s)"
GAP_MS = "(EXTRACT(EPOCH FROM (%(now)s - COALESCE(a.last_activity_at, a.started_at))) * 1000)::bigint"

# Time on task (idle gaps count 0), the lease renewed, the step row made if
# new, the rating upserted if its version is newer: one statement.
RATE = f"""
    WITH a AS (
        UPDATE labeling_assignment a SET
            total_time_ms = a.total_time_ms + CASE WHEN {GAP_MS} BETWEEN 1 AND %(idle_ms)s THEN {GAP_MS} ELSE 0 END,
            last_activity_at = GREATEST(a.last_activity_at, %(now)s), lease_expires_at = %(lease)s
        WHERE a.id = %(a)s AND a.status = 'in_progress' AND a.lease_expires_at > %(now)s AND a.labeler_id = {OWNER}
        RETURNING a.id, a.task_id
    ), step AS (
        INSERT INTO labeling_labeledstep (assignment_id, index, chosen_completion)
        SELECT id, %(i)s, NULL FROM a
        ON CONFLICT (assignment_id, index) DO UPDATE SET index = EXCLUDED.index
        RETURNING id
    ), r AS (
        INSERT INTO labeling_steprating (step_id, completion_index, text, rating, flagged, version, updated_at)
        SELECT step.id, 0, s.steps ->> %(i)s, %(rating)s, NULL, %(v)s, %(now)s
        FROM step, a JOIN labeling_task t ON t.id = a.task_id JOIN labeling_solution s ON s.id = t.solution_id
        ON CONFLICT (step_id, completion_index) DO UPDATE SET rating = EXCLUDED.rating, version = EXCLUDED.version,
            updated_at = EXCLUDED.updated_at
        WHERE labeling_steprating.version < EXCLUDED.version
        RETURNING step_id
    )
    SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM r)
"""

# A key press (static/js/press-queue.js): RATE, applied only to the state
# version the page showed, and that version moved on by one; one statement.
PRESS = (
    RATE.replace(
        "AND a.lease_expires_at > %(now)s AND a.labeler_id",
        "AND a.version = %(v)s AND a.lease_expires_at > %(now)s AND a.labeler_id",
    )
    .replace("lease_expires_at = %(lease)s\n", "lease_expires_at = %(lease)s, version = a.version + 1\n")
    .replace("%(rating)s, NULL, %(v)s, %(now)s", "%(rating)s, NULL, %(v)s + 1, %(now)s")
)
assert PRESS.count("%(v)s + 1") == 1
assert PRESS != RATE and "version = a.version + 1" in PRESS

# Submit: the frozen label, the finish reason, and the task closed when it
# has all its labelers (this statement's own submission counted by hand: the
# CTE's update is not visible to the rest of the statement).
FINISH = f"""
    WITH a AS (
        UPDATE labeling_assignment a SET status = 'submitted', submitted_at = %(now)s,
            finish_reason = CASE WHEN EXISTS (SELECT 1 FROM labeling_labeledstep ls JOIN labeling_steprating r
                ON r.step_id = ls.id WHERE ls.assignment_id = a.id AND r.rating = -1) THEN 'found_error'
                ELSE 'solution' END,
            label_steps_json = (SELECT json_agg(json_build_object('completions', json_build_array(json_build_object(
                'text', r.text, 'rating', r.rating, 'flagged', r.flagged)), 'human_completion', NULL,
                'chosen_completion', ls.chosen_completion) ORDER BY ls.index)
                FROM labeling_labeledstep ls JOIN labeling_steprating r ON r.step_id = ls.id
                WHERE ls.assignment_id = a.id)::text,
            total_time_ms = a.total_time_ms + CASE WHEN {GAP_MS} BETWEEN 1 AND %(idle_ms)s THEN {GAP_MS} ELSE 0 END,
            last_activity_at = GREATEST(a.last_activity_at, %(now)s)
        WHERE a.id = %(a)s AND a.status = 'in_progress' AND a.labeler_id = {OWNER}
        RETURNING a.task_id, a.labeler_id
    ), done AS (
        UPDATE labeling_task t SET status = 'done' FROM a
        WHERE t.id = a.task_id AND t.status = 'open' AND t.labelers_needed <= 1 + (
            SELECT count(*) FROM labeling_assignment s WHERE s.task_id = t.id AND s.status = 'submitted')
        RETURNING t.id
    )
    SELECT a.labeler_id, (SELECT count(*) FROM done) FROM a
"""

LEASE = """
    WITH n AS (
        INSERT INTO labeling_assignment (task_id, labeler_id, status, started_at, last_activity_at, lease_expires_at,
            total_time_ms, finish_reason_text, ratings_reset_version, version, task_kind)
        VALUES (%(task)s, %(labeler)s, 'in_progress', %(now)s, %(now)s, %(lease)s, 0, '', 0, 0, 'normal')
        RETURNING id, task_id, version
    )
    SELECT n.id, s.steps, p.problem, n.version FROM n JOIN labeling_task t ON t.id = n.task_id
    JOIN labeling_solution s ON s.id = t.solution_id JOIN labeling_problem p ON p.id = s.problem_id
"""

CURRENT = f"""
    SELECT a.id, s.steps, p.problem, a.version FROM labeling_assignment a JOIN labeling_task t ON t.id = a.task_id
    JOIN labeling_solution s ON s.id = t.solution_id JOIN labeling_problem p ON p.id = s.problem_id
    WHERE a.labeler_id = {OWNER} AND a.status = 'in_progress'
"""
OF_ASSIGNMENT = CURRENT.replace("a.status = 'in_progress'", "a.id = %(a)s")


def _params(request: HttpRequest, **extra: Any) -> dict[str, Any] | None:
    user = request.session.get("_auth_user_id")
    if user is None:
        return None
    now = timezone.now()
    return {
        "user": int(user), "now": now, "lease": now + timedelta(seconds=settings.LEASE_SECONDS),
        "idle_ms": settings.IDLE_GAP_SECONDS * 1000, **extra,
    }  # fmt: skip


def _panel(assignment: int, steps: Any, problem: str, version: int) -> str:
    rows = "".join(
        f'<li id="step-{i}"><span>{html.escape(text)}</span>'
        f'<button name="set_rating" value="1">+1</button><button name="set_rating" value="0">0</button>'
        f'<button name="set_rating" value="-1">-1</button></li>'
        for i, text in enumerate(json.loads(steps) if isinstance(steps, str) else steps)
    )
    return (
        f'<div id="task-panel" data-assignment="{assignment}"><div id="task-state" hidden data-version="{version}">'
        f"</div><p>{html.escape(problem)}</p><ol>{rows}</ol></div>"
    )


def _lease_next(cursor: Any, params: dict[str, Any], labeler: int) -> tuple[int, Any, str, int] | None:
    # The candidate search is planned on every run, as the product's.
    with connection.cursor() as search:
        search.execute(
            TASK_CANDIDATE.format(tried="", lock=" FOR UPDATE OF t SKIP LOCKED"),
            task_candidate_params(generation_id=params["generation"], labeler_id=labeler, at=params["now"]),
        )
        found = search.fetchone()
    if found is None:
        return None
    cursor.execute(LEASE, {**params, "task": found[0], "labeler": labeler})
    row = cursor.fetchone()
    return (int(row[0]), row[1], str(row[2]), int(row[3])) if row else None


def _generation() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM labeling_generation WHERE status = 'open' AND phase = 2 ORDER BY number LIMIT 1")
        row = cursor.fetchone()
    return int(row[0])


_GENERATION: list[int] = []


def next_task(request: HttpRequest) -> HttpResponse:
    params = _params(request)
    if params is None:
        return HttpResponse(status=403)
    if not _GENERATION:
        _GENERATION.append(_generation())
    params["generation"] = _GENERATION[0]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(CURRENT, params)
        row = cursor.fetchone()
        if row is None:
            cursor.execute(f"SELECT {OWNER}", params)
            leased = _lease_next(cursor, params, int(cursor.fetchone()[0]))
            if leased is None:
                return HttpResponse(status=204)
            row = leased
    response = HttpResponse(status=302)
    response["Location"] = f"/assignments/{row[0]}/"
    return response


def task(request: HttpRequest, pk: int) -> HttpResponse:
    params = _params(request, a=pk)
    if params is None:
        return HttpResponse(status=403)
    with connection.cursor() as cursor:
        cursor.execute(OF_ASSIGNMENT, params)
        row = cursor.fetchone()
    if row is None:
        return HttpResponse(status=404)
    panel = _panel(int(row[0]), row[1], str(row[2]), int(row[3]))
    return HttpResponse(f"<!doctype html><html><body>{panel}</body></html>")


def rate(request: HttpRequest, pk: int, step: int, completion: int) -> HttpResponse:
    raw = request.POST.get("set_rating", "")
    params = _params(request, a=pk, i=step, rating=int(raw) if raw else None, v=int(request.POST["version"]))
    if params is None:
        return HttpResponse(status=403)
    # Prepared as the product's fixed statements (labeling.work.hotpath), so
    # that the floor pays no more planning than the product.
    with prepared_cursor(connection) as cursor:
        cursor.execute(RATE, params)
        owned, written = cursor.fetchone()
    if not owned:
        return HttpResponse("This task can no longer be changed.", status=409)
    response = HttpResponse(f'<li id="step-{step}" hx-swap-oob="true" data-rating="{params["rating"]}"></li>')
    response["HX-Reswap"] = "none"
    response["X-Rating-Version"] = f"{pk}:{params['v'] if written else 0}"
    return response


def presses(request: HttpRequest, pk: int) -> HttpResponse:
    batch = json.loads(request.body)["presses"]
    if len(batch) != 1:
        return HttpResponse(status=400)  # the benchmark sends one press per batch
    press = batch[0]
    params = _params(request, a=pk, i=int(press["step"]), rating=press.get("rating"), v=int(press["version"]))
    if params is None:
        return HttpResponse(status=403)
    with prepared_cursor(connection) as cursor:
        cursor.execute(PRESS, params)
        owned, _written = cursor.fetchone()
    if not owned:
        return JsonResponse({"applied": 0, "refused": "stale"}, status=409)
    return JsonResponse({"applied": 1, "refused": None, "version": params["v"] + 1})


def submit(request: HttpRequest, pk: int) -> HttpResponse:
    params = _params(request, a=pk)
    if params is None:
        return HttpResponse(status=403)
    params["generation"] = _GENERATION[0] if _GENERATION else _generation()
    with transaction.atomic(), prepared_cursor(connection) as cursor:
        cursor.execute(FINISH, params)
        finished = cursor.fetchone()
        if finished is None:
            return HttpResponse("This task was already submitted.", status=409)
        leased = _lease_next(cursor, params, int(finished[0]))
    if leased is None:
        return HttpResponse('<div id="task-panel">No more tasks.</div>')
    response = HttpResponse(_panel(*leased))
    response["HX-Push-Url"] = f"/assignments/{leased[0]}/"
    return response


def alive(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [
    path("login/", alive),
    path("next/", next_task),
    path("assignments/<int:pk>/", task),
    path("assignments/<int:pk>/steps/<int:step>/<int:completion>/", rate),
    path("assignments/<int:pk>/presses/", presses),
    path("assignments/<int:pk>/submit/", submit),
]
