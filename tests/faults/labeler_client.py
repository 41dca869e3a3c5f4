"""A labeler as the fault tests drive it: plain HTTP (htmx headers) against gunicorn.

It remembers every rating the server acknowledged (a 200), so a test can check that
each of them is in the database after the fault.
"""

from __future__ import annotations

import http.client
import re
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Ack:
    assignment: int
    step: int
    completion: int
    rating: int
    version: int


@dataclass
class Outcome:
    status: int  # 0: no answer (connection refused, reset or timed out)
    seconds: float
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)


class LabelerClient:
    def __init__(self, port: int, cookies: dict[str, str], *, timeout: float = 15) -> None:
        self.port, self.cookies, self.timeout = port, dict(cookies), timeout
        self.conn: http.client.HTTPConnection | None = None
        self.acks: list[Ack] = []
        self.submitted: list[int] = []
        self.outcomes: list[Outcome] = []

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Outcome:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items()), "HX-Request": "true"}
        data = None
        if body is not None:
            data = urllib.parse.urlencode(body)
            headers |= {"Content-Type": "application/x-www-form-urlencoded",
                        "X-CSRFToken": self.cookies["csrftoken"], "Referer": "http://127.0.0.1/"}  # fmt: skip
        started = time.monotonic()
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            self.conn.request(method, path, body=data, headers=headers)
            response = self.conn.getresponse()
            text = response.read().decode(errors="replace")
        except (OSError, http.client.HTTPException):
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            outcome = Outcome(0, time.monotonic() - started)
            self.outcomes.append(outcome)
            return outcome
        outcome = Outcome(response.status, time.monotonic() - started, text, dict(response.headers))
        self.outcomes.append(outcome)
        return outcome

    def next_assignment(self) -> int | None:
        outcome = self.request("POST", "/next/", {})
        match = re.search(r"/assignments/(\d+)/", outcome.headers.get("Location", "") + outcome.body)
        return int(match.group(1)) if match else None

    def rate(self, assignment: int, step: int, rating: int = 1, *, version: int | None = None) -> Outcome:
        version = version if version is not None else step + 1
        outcome = self.request(
            "POST", f"/assignments/{assignment}/steps/{step}/0/",
            {"rating": "", "set_rating": rating, "flagged": "0", "version": version},
        )  # fmt: skip
        if outcome.status == 200:
            self.acks.append(Ack(assignment, step, 0, rating, version))
        return outcome

    def submit(self, assignment: int) -> Outcome:
        outcome = self.request("POST", f"/assignments/{assignment}/submit/", {})
        if outcome.status == 200:
            self.submitted.append(assignment)
        return outcome


def stored_rating(db: Any, ack: Ack) -> list[tuple[int | None, int]]:
    """(rating, version) rows stored for the acknowledged completion (one, or none)."""
    rows: list[tuple[int | None, int]] = db.execute(
        """SELECT r.rating, r.version FROM labeling_steprating r JOIN labeling_labeledstep s ON s.id = r.step_id
           WHERE s.assignment_id = %s AND s.index = %s AND r.completion_index = %s""",
        [ack.assignment, ack.step, ack.completion],
    ).fetchall()
    return rows


def missing_acks(db: Any, acks: list[Ack]) -> list[Ack]:
    """Acknowledged ratings that are not in the database as acknowledged (or newer)."""
    missing = []
    for ack in acks:
        rows = stored_rating(db, ack)
        if len(rows) != 1 or rows[0][1] < ack.version or (rows[0][1] == ack.version and rows[0][0] != ack.rating):
            missing.append(ack)
    return missing


def duplicated_ratings(db: Any) -> int:
    return int(
        db.execute(
            """SELECT count(*) FROM (SELECT step_id, completion_index FROM labeling_steprating
               GROUP BY step_id, completion_index HAVING count(*) > 1) d"""
        ).fetchone()[0]
    )
