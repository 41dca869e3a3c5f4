"""Every URL pattern against anonymous, labeler A, labeler B, staff, screening and suspended callers.

The patterns are walked from the root resolver, so a route added anywhere
(a new app, a new API view, the admin) shows up here. Each one needs an entry
in MATRIX saying who may use it; an unlisted pattern fails the test with
"add it to the matrix". Everything under admin/ is the Django admin and is
checked by one rule (staff only) for every model and view it registers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from labeling.models import Assignment, AssignmentStatus, StepRating, TaskKind
from tests.security.conftest import World, snapshot

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Rule:
    """Who may call a route. access:
    public  - anyone;
    login   - any signed-in person (html: anonymous is sent to the login page);
    work    - a labeler asking for work: suspended ones are refused, screening ones get no normal task;
    own     - a labeler's own assignment at <pk>: anyone else's answers 404 and changes nothing;
    staff   - research staff only.
    """

    access: str
    method: str = "get"
    api: bool = False
    obj: str = ""  # what <pk> names: assignment, problem, solution, generation, export


RATE_BODY = {"step": 0, "completion": 0, "rating": 1, "flagged": False, "version": 1}
REASON_BODY = {"reason": "no reason"}

MATRIX: dict[str, Rule] = {
    "healthz": Rule("public"),
    "favicon": Rule("public"),
    "admin-login": Rule("public"),
    "login": Rule("public"),
    "guide": Rule("public"),
    "logout": Rule("public", method="post"),
    "home": Rule("login"),
    "screening-result": Rule("login"),
    "api-docs": Rule("login"),
    "api-schema": Rule("login", api=True),
    "next-task": Rule("work", method="post"),
    "api-task-next": Rule("work", method="post", api=True),
    "task": Rule("own", obj="assignment"),
    "rate": Rule("own", method="post", obj="assignment"),
    "presses": Rule("own", method="post", obj="assignment"),
    "submit": Rule("own", method="post", obj="assignment"),
    "give-up": Rule("own", method="post", obj="assignment"),
    "bad-problem": Rule("own", method="post", obj="assignment"),
    "api-assignment": Rule("own", api=True, obj="assignment"),
    "api-assignment-ratings": Rule("own", method="post", api=True, obj="assignment"),
    "api-assignment-submit": Rule("own", method="post", api=True, obj="assignment"),
    "api-assignment-give-up": Rule("own", method="post", api=True, obj="assignment"),
    "api-assignment-bad-problem": Rule("own", method="post", api=True, obj="assignment"),
    "dashboard": Rule("staff"),
    "dashboard-export-job": Rule("staff", obj="export"),
    "dashboard-export-start": Rule("staff", method="post"),
    "api-problem-list": Rule("staff", api=True),
    "api-problem-bulk-import": Rule("staff", method="post", api=True),
    "api-problem-detail": Rule("staff", api=True, obj="problem"),
    "api-solution-list": Rule("staff", api=True),
    "api-solution-bulk-import": Rule("staff", method="post", api=True),
    "api-solution-detail": Rule("staff", api=True, obj="solution"),
    "api-generation-list": Rule("staff", api=True),
    "api-generation-detail": Rule("staff", api=True, obj="generation"),
    "api-export-list": Rule("staff", api=True),
    "api-export-detail": Rule("staff", api=True, obj="export"),
    "api-export-download": Rule("staff", api=True, obj="export"),
    # Phase 1 (labeling/phase_one_views.py): the labeler's own assignment, like rate.
    "phase-one-rate": Rule("own", method="post", obj="assignment"),
    "phase-one-continue": Rule("own", method="post", obj="assignment"),
    "phase-one-retry": Rule("own", method="post", obj="assignment"),
}


@dataclass(frozen=True)
class Route:
    pattern: str
    name: str | None

    @property
    def key(self) -> str:
        return self.name or self.pattern

    @property
    def is_admin(self) -> bool:
        return self.pattern.startswith("admin/") and self.name != "admin-login"


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[Route]:
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = ":".join(filter(None, [namespace, p.namespace or ""]))
            yield from _walk(p.url_patterns, prefix + str(p.pattern), ns)
        elif isinstance(p, URLPattern):
            name = f"{namespace}:{p.name}" if namespace and p.name else p.name
            yield Route(prefix + str(p.pattern), name)


ROUTES = list(_walk(get_resolver().url_patterns))


def _concrete(pattern: str, values: dict[str, str]) -> str:
    """A URL for a route or regex pattern, with each parameter replaced by values[name]."""
    url = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: values.get(m.group(1), "1"), pattern)
    url = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values.get(m.group(1), "1"), url)
    url = url.replace("^", "").replace("$", "").replace("\\.", ".").replace("/?", "/")
    url = re.sub(r"\(([^|)]+)\|[^)]*\)", r"\1", url)  # an alternation: its first choice
    return "/" + url


def _values(world: World, rule: Rule, pk: int | None = None) -> dict[str, str]:
    objects = {
        "assignment": world.a_assignment.pk,
        "problem": world.problem.pk,
        "solution": world.solution.pk,
        "generation": world.generation.pk,
        "export": world.export.pk,
    }
    chosen = pk if pk is not None else objects.get(rule.obj, 1)
    return {
        "pk": str(chosen),
        "step": "0",
        "completion": "0",
        "format": "json",
        "app_label": "labeling",
        "url": "no-such-page/",
        "object_id": "1",
        "content_type_id": "1",
    }


def _body(route: Route) -> dict[str, Any]:
    if route.key in ("rate", "phase-one-rate"):
        return {"set_rating": "1", "flagged": "0", "version": "1"}
    if route.key == "api-assignment-ratings":
        return RATE_BODY
    if route.key.endswith(("give-up", "bad-problem")):
        return REASON_BODY
    if route.key.endswith("bulk-import"):
        return {"items": [{"unique_id": "matrix/1", "problem": "p"}]}
    return {}


def _call(client: Any, route: Route, rule: Rule, url: str) -> Any:
    if rule.api:
        return getattr(client, rule.method)(url, _body(route), format="json")
    return getattr(client, rule.method)(url, _body(route))


def _client(user: Any, *, api: bool) -> Any:
    client = APIClient() if api else Client()
    if user is not None:
        client.force_login(user)
    return client


def _is_login_redirect(response: Any) -> bool:
    return response.status_code == 302 and ("/login/" in response["Location"])


def test_it_has_a_matrix_entry_for_every_route() -> None:
    unlisted = [r.pattern for r in ROUTES if not r.is_admin and r.key.split(":")[-1] not in MATRIX]
    assert not unlisted, f"new URL patterns without an access rule: {unlisted}; add them to the matrix"
    stale = set(MATRIX) - {r.key for r in ROUTES}
    assert not stale, f"matrix entries without a route: {stale}"


NON_ADMIN = [r for r in ROUTES if not r.is_admin and r.key in MATRIX]


@pytest.mark.parametrize("route", NON_ADMIN, ids=lambda r: r.pattern)
def test_it_refuses_anonymous_callers_and_labelers_where_they_do_not_belong(world: World, route: Route) -> None:
    rule = MATRIX[route.key]
    url = _concrete(route.pattern, _values(world, rule))
    before = snapshot()
    anonymous = _call(_client(None, api=rule.api), route, rule, url)
    if rule.access == "public":
        assert anonymous.status_code < 400, (url, anonymous.status_code)
        return
    if rule.api:
        assert anonymous.status_code in (401, 403), (url, anonymous.status_code)
    else:
        assert _is_login_redirect(anonymous), (url, anonymous.status_code)
    assert snapshot() == before
    if rule.access == "staff":
        labeler = _call(_client(world.a.user, api=rule.api), route, rule, url)
        # The API forbids; staff_member_required sends a non-staff user to the (admin) login page.
        assert labeler.status_code == 403 if rule.api else _is_login_redirect(labeler), (url, labeler.status_code)
        assert snapshot() == before
        staff = _call(_client(world.staff, api=rule.api), route, rule, url)
        assert staff.status_code < 500, (url, staff.status_code)


OWN = [r for r in NON_ADMIN if MATRIX[r.key].access == "own"]


@pytest.mark.parametrize("route", OWN, ids=lambda r: r.pattern)
def test_it_answers_404_for_another_labelers_assignment_and_changes_nothing(world: World, route: Route) -> None:
    rule = MATRIX[route.key]
    before = snapshot()
    # B on A's assignment, and A on the ids next to their own (B's, and one that is not A's).
    attempts = [
        (world.b, world.a_assignment.pk),
        (world.a, world.a_assignment.pk + 1),
        (world.a, world.a_assignment.pk - 1),
        (world.a, world.suspended_assignment.pk),
        (world.staff, world.a_assignment.pk),
    ]
    for who, pk in attempts:
        user = who if not hasattr(who, "user") else who.user
        response = _call(_client(user, api=rule.api), route, rule, _concrete(route.pattern, _values(world, rule, pk)))
        assert response.status_code == 404, (route.pattern, user.username, pk, response.status_code)
        assert snapshot() == before


@pytest.mark.parametrize("route", OWN, ids=lambda r: r.pattern)
def test_it_lets_the_owner_use_their_own_assignment(world: World, route: Route) -> None:
    rule = MATRIX[route.key]
    url = _concrete(route.pattern, _values(world, rule))
    response = _call(_client(world.a.user, api=rule.api), route, rule, url)
    # Reached the view: it answered, validated or refused on state, never as if the object were missing.
    assert response.status_code in (200, 302, 400, 409, 422), (url, response.status_code)


ADMIN = [r for r in ROUTES if r.is_admin]


def test_it_keeps_every_admin_page_for_staff(world: World) -> None:
    anonymous, labeler, staff = Client(), _client(world.a.user, api=False), _client(world.staff, api=False)
    before = snapshot()
    for route in ADMIN:
        url = _concrete(route.pattern, _values(world, Rule("staff")))
        if route.name in ("admin:login", "admin:logout"):
            continue  # the login form (redirected to ours) and sign-out need no staff
        for who, client in (("anonymous", anonymous), ("labeler", labeler)):
            for method in ("get", "post"):
                response = getattr(client, method)(url, {})
                assert _is_login_redirect(response), (who, method, url, response.status_code)
        assert snapshot() == before
        response = staff.get(url)
        assert response.status_code < 500, (url, response.status_code)
    assert len(ADMIN) > 20  # every registered model's pages were walked


def test_it_sends_the_admin_login_to_the_throttled_sign_in_page() -> None:
    response = Client().get("/admin/login/?next=/admin/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/admin/"


def test_it_shows_a_labeler_only_their_own_current_assignment(world: World) -> None:
    page = _client(world.a.user, api=False).get("/").content.decode()
    assert f"/assignments/{world.a_assignment.pk}/" in page
    assert f"/assignments/{world.b_assignment.pk}/" not in page


def test_it_hands_a_screening_labeler_no_normal_work(world: World) -> None:
    before = Assignment.objects.filter(labeler=world.screening).count()
    html = _client(world.screening.user, api=False).post("/next/")
    api = _client(world.screening.user, api=True).post("/api/tasks/next/")
    assert html.status_code == 302 and api.status_code == 204
    assert not Assignment.objects.filter(labeler=world.screening).exclude(task__kind=TaskKind.SCREENING).exists()
    assert Assignment.objects.filter(labeler=world.screening).count() == before


def test_it_refuses_a_suspended_labeler_every_way_in(world: World) -> None:
    user = world.suspended.user
    before = snapshot()
    assert _client(user, api=False).post("/next/").status_code == 403
    assert _client(user, api=True).post("/api/tasks/next/").status_code == 403
    own = world.suspended_assignment
    assert Assignment.objects.get(pk=own.pk).status == AssignmentStatus.EXPIRED
    # The lease was taken back on suspension: rating it directly is refused.
    html = _client(user, api=False).post(f"/assignments/{own.pk}/steps/0/0/", {"set_rating": "1", "version": "1"})
    api = _client(user, api=True).post(f"/api/assignments/{own.pk}/ratings/", RATE_BODY, format="json")
    assert html.status_code in (404, 409) and api.status_code in (404, 409)
    assert not StepRating.objects.filter(step__assignment=own, rating__isnull=False).exists()
    assert snapshot() == before
