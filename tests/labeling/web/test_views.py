"""Labeler pages: sign-in, home, guide, the task screen and its htmx endpoints."""

from __future__ import annotations

from html import escape

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from labeling.models import Assignment, AssignmentStatus, Labeler, LabelerStatus, StepRating
from tests.labeling.workflow_factories import (
    STEPS,
    FixedDraw,
    make_generation,
    make_labeler,
    make_task,
)

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


def _client(labeler: Labeler) -> Client:
    client = Client()
    client.force_login(labeler.user)
    return client


def _started(**task_kwargs) -> tuple[Client, Assignment]:
    make_task(generation=make_generation(), **task_kwargs)
    labeler = make_labeler()
    client = _client(labeler)
    response = client.post(reverse("next-task"))
    assert response.status_code == 302
    return client, Assignment.objects.get(labeler=labeler)


def _rate(client: Client, a: Assignment, step: int, rating: int | str, version: int, *, completion: int = 0, **extra):
    url = reverse("rate", args=[a.pk, step, completion])
    return client.post(url, {"set_rating": rating, "flagged": "0", "version": version}, **extra)


def test_it_asks_to_sign_in():
    for name, args in [("home", []), ("task", [1])]:
        response = Client().get(reverse(name, args=args))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_it_signs_in_with_a_password():
    make_labeler(name="ann")
    response = Client().post(reverse("login"), {"username": "ann", "password": "pw-for-tests-1"})
    assert response.status_code == 302
    assert response["Location"] == reverse("home")


def test_a_first_visit_shows_status_and_counts_and_asking_for_work_creates_the_labeler():
    from django.contrib.auth.models import User

    user = User.objects.create_user(username="new", password="pw-for-tests-1")
    client = Client()
    client.force_login(user)
    response = client.get(reverse("home"))
    assert response.status_code == 200
    assert not Labeler.objects.filter(user=user).exists()  # looking creates nothing
    client.post(reverse("next-task"))
    assert Labeler.objects.get(user=user).status == LabelerStatus.SCREENING
    body = response.content.decode()
    assert "Start labeling" in body
    assert "in screening" in body
    assert 'data-stat="steps-total">0<' in body
    assert reverse("guide") in body


def test_it_counts_solutions_and_steps_on_home():
    client, a = _started()
    _rate(client, a, 0, 1, 1)
    _rate(client, a, 1, -1, 2)
    client.post(reverse("submit", args=[a.pk]))
    body = client.get(reverse("home")).content.decode()
    assert 'data-stat="solutions-today">1<' in body
    assert 'data-stat="steps-total">2<' in body


def test_it_offers_no_work_to_a_suspended_labeler():
    make_task(generation=make_generation())
    client = _client(make_labeler(status=LabelerStatus.SUSPENDED))
    assert "Start labeling" not in client.get(reverse("home")).content.decode()
    assert client.post(reverse("next-task")).status_code == 403
    assert not Assignment.objects.exists()


def test_it_shows_the_guide_to_anyone():
    response = Client().get(reverse("guide"))
    assert response.status_code == 200
    assert "Flag it" in response.content.decode()


def test_it_needs_post_to_take_work_or_rate():
    client, a = _started()
    assert client.get(reverse("next-task")).status_code == 405
    assert client.get(reverse("rate", args=[a.pk, 0, 0])).status_code == 405
    assert client.get(reverse("submit", args=[a.pk])).status_code == 405
    assert client.get(reverse("give-up", args=[a.pk])).status_code == 405
    assert client.post(reverse("task", args=[a.pk])).status_code == 405


def test_it_says_when_the_queue_is_empty():
    client = _client(make_labeler())
    response = client.post(reverse("next-task"), follow=True)
    assert "No tasks are waiting" in response.content.decode()


def test_it_shows_the_problem_and_expected_answer_but_not_the_reference_solution():
    client, a = _started(answer="\\frac{1}{2}")
    body = client.get(reverse("task", args=[a.pk])).content.decode()
    assert a.task.solution.problem.problem in body
    assert "\\boxed{\\frac{1}{2}}" in body
    assert "hidden ref" not in body
    assert escape(STEPS[0]) in body
    # Steps are revealed one at a time: the later ones wait unshown in the
    # page's template, from which a key press reveals the next at once.
    shown, ahead = body.split('<template id="steps-ahead">')
    assert escape(STEPS[1]) not in shown
    assert escape(STEPS[1]) in ahead.split("</template>")[0]


def test_it_escapes_step_text():
    client, a = _started(steps=["It costs $5 and <script>alert(1)</script> $7."])
    body = client.get(reverse("task", args=[a.pk])).content.decode()
    assert "<script>alert(1)" not in body
    assert "&lt;script&gt;" in body


def test_it_answers_a_rating_with_only_the_rated_row_and_the_revealed_step():
    client, a = _started()
    response = _rate(client, a, 0, 1, 1, **HX)
    assert response.status_code == 200
    assert response["X-Rating-Version"] == f"{a.pk}:1"
    assert response["HX-Reswap"] == "none"  # everything is swapped out of band
    body = response.content.decode()
    assert "<section" not in body and "<html" not in body
    assert 'id="task-state" hidden data-version="1" ' in body
    assert 'data-current="c-1-0" data-steps="2"' in body
    assert body.count('hx-swap-oob="true"') == 3  # state, finish box, the rated row
    assert '<form class="completion r-good"\n      id="c-0-0"' in body
    assert '<ol hx-swap-oob="beforeend:#steps">\n<li class="step" id="step-1">' in body
    assert escape(STEPS[1]) in body  # the next step is revealed
    assert escape(STEPS[0]) in body
    assert StepRating.objects.get().rating == 1


def test_it_answers_a_re_rating_without_revealing_anything():
    client, a = _started()
    _rate(client, a, 0, 1, 1, **HX)
    body = _rate(client, a, 0, 0, 2, **HX).content.decode()
    assert '<form class="completion r-okay"\n      id="c-0-0"' in body
    assert "beforeend:#steps" not in body
    assert 'data-current="c-1-0"' in body


def test_it_shows_the_finish_box_out_of_band_after_the_last_step():
    client, a = _started(steps=["Only step."])
    body = _rate(client, a, 0, 1, 1, **HX).content.decode()
    assert '<div id="finish-box" hx-swap-oob="true">' in body
    assert 'id="finish"' in body
    assert 'data-current="finish"' in body


def test_it_answers_a_rating_that_drops_steps_with_the_whole_panel():
    client, a = _started(alternatives={1: ["Alternative A"]})
    for version, (step, rating) in enumerate([(0, 1), (1, 1), (2, 1)], start=1):
        _rate(client, a, step, rating, version, **HX)
    response = _rate(client, a, 1, -1, 4, **HX)
    assert "HX-Reswap" not in response
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="task"')
    assert 'id="step-2"' not in body
    assert "Alternative A" in body
    assert response["X-Rating-Version"] == f"{a.pk}:4"


def test_it_ignores_a_stale_rating_and_answers_with_what_is_stored():
    client, a = _started()
    _rate(client, a, 0, 1, 5, **HX)
    response = _rate(client, a, 0, -1, 3, **HX)
    assert response.status_code == 200
    assert response["X-Rating-Version"] == f"{a.pk}:5"
    assert '<form class="completion r-good"\n      id="c-0-0"' in response.content.decode()
    assert StepRating.objects.get().rating == 1


def test_it_rates_in_a_fixed_number_of_queries(django_assert_num_queries):
    client, a = _started()
    _rate(client, a, 0, 1, 1, **HX)
    # session, user; BEGIN, the assignment locked with its task and steps (and
    # the owner checked), ratings, new LabeledStep, upsert, previous step's
    # chosen_completion, assignment time and lease, COMMIT. The answer itself
    # needs none.
    with django_assert_num_queries(10):
        _rate(client, a, 1, 1, 2, **HX)
    # Re-rating a stored step: no LabeledStep to create, no chosen_completion to move.
    with django_assert_num_queries(8):
        _rate(client, a, 1, 0, 3, **HX)


# With probability QC_RATE a hand-out looks for an unseen QC item (one more
# statement). The draw is fixed here, both ways, so the count is the same in
# every run.
QC_DRAWS = [pytest.param(0.99, 0, id="no-qc-draw"), pytest.param(0.0, 1, id="qc-draw")]


@pytest.mark.parametrize(("draw", "qc_lookups"), QC_DRAWS)
def test_it_hands_out_the_next_task_in_a_bounded_number_of_queries(
    django_assert_max_num_queries, monkeypatch, draw, qc_lookups
):
    monkeypatch.setattr("labeling.work.queue._RNG", FixedDraw(draw))
    make_task(generation=make_generation())
    client = _client(make_labeler())
    # session, user, labeler; the transaction (a savepoint and its release
    # here): the labeler's lock with their current
    # lease, the QC window, open generations, candidate (locked), its places
    # with its solution and problem, (on a QC draw: the unseen QC items,
    # none here), the new assignment. A bound, not an exact count: the
    # queue's QC rules are growing. (Before: at most 14.)
    with django_assert_max_num_queries(11 + qc_lookups):
        assert client.post(reverse("next-task")).status_code == 302
    assert Assignment.objects.filter(status=AssignmentStatus.IN_PROGRESS).count() == 1


@pytest.mark.parametrize(("draw", "qc_lookups"), QC_DRAWS)
def test_it_submits_and_hands_out_the_next_task_in_a_bounded_number_of_queries(
    django_assert_max_num_queries, monkeypatch, draw, qc_lookups
):
    client, a = _started()
    monkeypatch.setattr("labeling.work.queue._RNG", FixedDraw(draw))
    make_task(generation=a.task.generation)
    _rate(client, a, 0, -1, 1, **HX)
    # session; one transaction (a savepoint and its release here, inside
    # the test's transaction): the submit (task and assignment locked with
    # the owner checked and the labeler row read, ratings, the frozen label
    # written with the task closed: one statement on PostgreSQL, two on
    # SQLite) and the hand-out (the labeler's lock with their current lease,
    # the QC window, generations, candidate, its places with its solution
    # and problem, the lease). The new task has no ratings to read. A bound:
    # the queue's QC rules are growing. (Before: at most 15; 21 in two
    # transactions, plus a health-check ping, before that.) The session was
    # verified by this process when the task was handed out
    # (annotate.auth.SessionUser): the user is not loaded (the owner's check
    # in the locking read checks them), and the labeler row comes with the
    # assignment's locking read.
    finish_statements = 1 if connection.vendor == "postgresql" else 2
    with django_assert_max_num_queries(12 + finish_statements + qc_lookups) as captured:
        response = client.post(reverse("submit", args=[a.pk]), **HX)
    assert response.status_code == 200
    statements = [q["sql"] for q in captured.captured_queries]
    assert sum(sql.startswith("SAVEPOINT") for sql in statements) == 1
    assert sum('FROM "auth_user"' in sql for sql in statements) == 0
    # The labeler row is read by the locking read (LABELER_JOIN), not apart;
    # the hand-out's lock reads its status again under the lock.
    assert sum("JOIN labeling_labeler l ON l.id = a.labeler_id" in sql for sql in statements) == 1
    assert sum("FROM labeling_labeler WHERE user_id" in sql for sql in statements) == 0
    assert sum('FROM "labeling_labeler"' in sql for sql in statements) == 0  # not through the ORM either
    following = Assignment.objects.get(labeler=a.labeler, status=AssignmentStatus.IN_PROGRESS)
    assert f'data-assignment="{following.pk}"' in response.content.decode()


def test_a_qc_hand_out_reads_its_task_solution_and_problem_in_one_query(django_assert_max_num_queries, monkeypatch):
    from tests.labeling.gold_factories import make_qc_pool

    client, a = _started()
    qc = make_qc_pool(generation=a.task.generation, size=1)[0]
    make_task(generation=a.task.generation)
    monkeypatch.setattr("labeling.work.queue._RNG", FixedDraw(0.0))
    _rate(client, a, 0, -1, 1, **HX)
    # As the hand-out with a QC draw (at most 16, above), plus one read of
    # the drawn QC item with its solution and problem: nothing is loaded
    # again to draw its panel (before: the item, then its solution and its
    # problem, lazily, 18).
    with django_assert_max_num_queries(17) as captured:
        response = client.post(reverse("submit", args=[a.pk]), **HX)
    assert response.status_code == 200
    following = Assignment.objects.get(labeler=a.labeler, status=AssignmentStatus.IN_PROGRESS)
    assert following.task_id == qc.pk
    assert escape(qc.solution.problem.problem) in response.content.decode()
    # The candidate's places read its problem too (the draw comes after the
    # claim); nothing reads a problem, or a solution, on its own.
    statements = [q["sql"] for q in captured.captured_queries]
    problems = [sql for sql in statements if "labeling_problem" in sql]
    assert len(problems) == 2 and all("JOIN" in sql for sql in problems), statements
    assert not [sql for sql in statements if 'FROM "labeling_solution"' in sql], statements


def test_it_redirects_a_plain_form_post_back_to_the_task():
    client, a = _started()
    response = _rate(client, a, 0, 0, 1)
    assert response.status_code == 302
    assert response["Location"] == reverse("task", args=[a.pk]) + "#step-0"


def test_it_resumes_at_the_same_step_after_a_reload():
    client, a = _started()
    _rate(client, a, 0, 1, 1, **HX)
    client.post(reverse("rate", args=[a.pk, 1, 0]), {"rating": "", "set_flagged": "1", "version": 2}, **HX)
    body = client.get(reverse("task", args=[a.pk])).content.decode()
    assert 'data-current="c-1-0"' in body
    assert 'data-version="2"' in body
    assert 'name="version" value="3"' in body
    assert body.count('class="flag on"') == 1


def test_it_answers_404_for_another_labelers_assignment_and_changes_nothing():
    _owner, a = _started()
    intruder = _client(make_labeler())
    assert intruder.get(reverse("task", args=[a.pk])).status_code == 404
    assert _rate(intruder, a, 0, 1, 1).status_code == 404
    assert intruder.post(reverse("submit", args=[a.pk])).status_code == 404
    assert intruder.post(reverse("give-up", args=[a.pk]), {"reason": "mine now"}).status_code == 404
    a.refresh_from_db()
    assert a.status == AssignmentStatus.IN_PROGRESS
    assert not StepRating.objects.exists()


def test_it_refuses_a_step_that_is_not_reached_yet():
    client, a = _started()
    response = _rate(client, a, 3, 1, 1, **HX)
    assert response.status_code == 409
    assert "earlier steps" in response.content.decode()


def test_it_rejects_a_malformed_rating():
    client, a = _started()
    assert _rate(client, a, 0, 7, 1).status_code == 400
    assert _rate(client, a, 0, 1, 0).status_code == 400  # versions start at 1
    assert not StepRating.objects.exists()


def test_it_submits_and_hands_out_the_next_task_to_htmx():
    client, a = _started()
    second = make_task(generation=a.task.generation)
    _rate(client, a, 0, -1, 1, **HX)
    response = client.post(reverse("submit", args=[a.pk]), **HX)
    assert response.status_code == 200
    following = Assignment.objects.get(task=second)
    assert response["HX-Push-Url"] == reverse("task", args=[following.pk])
    assert "Saved. Here is your next task." in response.content.decode()
    a.refresh_from_db()
    assert (a.status, a.finish_reason) == (AssignmentStatus.SUBMITTED, "found_error")


def test_it_submits_and_redirects_without_js():
    client, a = _started()
    _rate(client, a, 0, -1, 1)
    response = client.post(reverse("submit", args=[a.pk]))
    assert response.status_code == 302
    assert response["Location"] == reverse("home")  # nothing else queued


def test_it_refuses_to_submit_an_unfinished_task():
    client, a = _started()
    response = client.post(reverse("submit", args=[a.pk]), **HX)
    assert response.status_code == 409
    a.refresh_from_db()
    assert a.status == AssignmentStatus.IN_PROGRESS


def test_it_makes_a_submitted_task_read_only():
    client, a = _started()
    _rate(client, a, 0, -1, 1)
    client.post(reverse("submit", args=[a.pk]))
    response = _rate(client, a, 0, 1, 2, **HX)
    assert response.status_code == 409
    assert "already submitted" in response.content.decode()
    page = client.get(reverse("task", args=[a.pk])).content.decode()
    assert "can no longer be changed" in page
    assert "disabled" in page
    assert StepRating.objects.get().rating == -1


@pytest.mark.parametrize(("url_name", "reason"), [("give-up", "give_up"), ("bad-problem", "bad_problem")])
def test_it_needs_a_reason_to_give_up_or_report_a_bad_problem(url_name, reason):
    client, a = _started()
    response = client.post(reverse(url_name, args=[a.pk]), {"reason": "  "}, **HX)
    assert response.status_code == 422
    assert "Say briefly why" in response.content.decode()
    a.refresh_from_db()
    assert a.status == AssignmentStatus.IN_PROGRESS

    response = client.post(reverse(url_name, args=[a.pk]), {"reason": "the answer key is wrong"})
    assert response.status_code == 302
    a.refresh_from_db()
    assert (a.status, a.finish_reason, a.finish_reason_text) == ("submitted", reason, "the answer key is wrong")


def test_visiting_the_home_page_creates_no_labeler_row() -> None:
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_user(username="an-admin", password="x", is_staff=True)
    client = Client()
    client.force_login(admin)
    assert client.get(reverse("home")).status_code == 200
    assert client.get(reverse("screening-result")).status_code == 302
    assert not Labeler.objects.filter(user=admin).exists()


def test_a_plain_text_answer_is_shown_as_written_not_typeset() -> None:
    client, assignment = _started(answer="sum_(k=1)^n 1/k")
    page = client.get(reverse("task", args=[assignment.pk])).content.decode()
    assert '<span class="answer-text"><bdi>sum_(k=1)^n 1/k</bdi></span>' in page
    assert "\\(" not in page.split('class="answer"')[1].split("</p>")[0]


def test_a_latex_answer_in_words_shows_its_words_as_text_and_its_formula_as_math() -> None:
    client, assignment = _started(answer="The limit exists and is equal to \\sqrt{3}")
    page = client.get(reverse("task", args=[assignment.pk])).content.decode()
    assert '<span class="answer-text"><bdi>The limit exists and is equal to</bdi></span>' in page
    assert '<span class="math">\\(\\sqrt{3}\\)</span>' in page
    assert "\\boxed{The limit" not in page


def test_a_latex_formula_answer_is_one_boxed_formula() -> None:
    client, assignment = _started(answer="\\frac{a^3+2b}{3a}")
    page = client.get(reverse("task", args=[assignment.pk])).content.decode()
    assert "\\(\\boxed{\\frac{a^3+2b}{3a}}\\)" in page
