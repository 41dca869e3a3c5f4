"""Prepared hot-path statements (annotate.postgresql.prepared_cursor): planned once per connection, stored the same.

The rating's fixed statements are prepared on the server; the candidate
search, whose best plan depends on its values, and every ORM query are not.
``DATABASE_PREPARED_STATEMENTS=false`` (a pooler that cannot carry them)
prepares nothing and changes nothing else. On SQLite there is nothing to
prepare and the rating tests run there too.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from labeling.models import Assignment, StepRating
from labeling.work import hotpath
from labeling.work.queue import assignment_next
from labeling.work.rating import Press, presses_apply
from tests.labeling.workflow_factories import make_generation, make_labeler, make_task

postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's")


def _prepared() -> list[str]:
    # What this connection has prepared, as PostgreSQL itself lists it.
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def _press_twice() -> Assignment:
    make_task(generation=make_generation())
    make_task(generation=make_generation())
    a = assignment_next(labeler=make_labeler(), now=timezone.now())
    assert a is not None
    now = timezone.now() + timedelta(seconds=1)
    for version, rating in ((0, 1), (1, -1)):
        pressed = presses_apply(
            assignment_id=a.pk, user_id=a.labeler.user_id, presses=[Press(0, 0, version, rating=rating)], now=now
        )
        assert (pressed.applied, pressed.refusal) == (1, None)
    return a


def _reconnect() -> None:
    # The setting is read when a connection opens.
    connection.close()
    connection.ensure_connection()


@postgresql_only
@pytest.mark.django_db(transaction=True)  # a fresh connection, outside the test's transaction
def test_the_rating_statements_are_prepared_and_the_candidate_search_is_not():
    _reconnect()
    a = _press_twice()
    prepared = _prepared()
    assert any("FROM labeling_assignment a" in s and "FOR UPDATE OF a" in s for s in prepared)  # the locking read
    assert any(s.lstrip().startswith("INSERT INTO labeling_steprating") for s in prepared)  # the upsert
    assert any(s.lstrip().startswith("UPDATE labeling_assignment SET total_time_ms") for s in prepared)
    assert not any("ORDER BY t.priority DESC" in s for s in prepared)  # the candidate search
    assert not any('"labeling_task"' in s for s in prepared)  # an ORM query
    # Prepared once each: the second press ran the same statements again.
    assert len(prepared) == len(set(prepared))
    assert list(StepRating.objects.filter(step__assignment=a).values_list("rating", flat=True)) == [-1]


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_with_prepared_statements_off_nothing_is_prepared_and_the_presses_are_stored_the_same():
    with override_settings(DATABASE_PREPARED_STATEMENTS=False):
        _reconnect()
        a = _press_twice()
        assert _prepared() == []
    _reconnect()
    assert list(StepRating.objects.filter(step__assignment=a).values_list("rating", flat=True)) == [-1]


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_prepared_statement_is_logged_with_its_values():
    _reconnect()
    make_task(generation=make_generation())
    a = assignment_next(labeler=make_labeler(), now=timezone.now())
    assert a is not None
    with CaptureQueriesContext(connection) as queries:
        presses_apply(assignment_id=a.pk, user_id=a.labeler.user_id, presses=[Press(0, 0, 0, rating=1)],
                      now=timezone.now() + timedelta(seconds=1))  # fmt: skip
    lock = next(q["sql"] for q in queries.captured_queries if "FOR UPDATE OF a" in q["sql"])
    assert f"WHERE a.id = {a.pk} " in lock and "$1" not in lock


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_the_hand_outs_fixed_reads_are_prepared_the_labeler_of_a_user_and_the_qc_window():
    from labeling.labelers import labeler_for_user

    _reconnect()
    make_task(generation=make_generation())
    user = make_labeler().user
    user._state.fields_cache.clear()  # as a new request's user: the labeler is read, not cached
    labeler = labeler_for_user(user=user)
    assert assignment_next(labeler=labeler, now=timezone.now()) is not None
    prepared = _prepared()
    assert any("FROM labeling_labeler WHERE user_id = $1" in s for s in prepared)
    # The QC window (labeling.quality.control), its fixed conditions in the text (test_hot_plans.py).
    assert any("a.task_kind = 'quality_control'" in s and "LIMIT $2" in s for s in prepared)


def test_every_hot_path_statement_is_short_enough_for_psycopgs_conversion_cache():
    # Beyond this length psycopg parses a statement's placeholders on every run
    # (labeling.work.hotpath.compact).
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    statements = {name: value for name, value in vars(hotpath).items() if name.isupper() and isinstance(value, str)}
    assert "PRESS_PLAIN" in statements and len(statements) > 10
    for name, statement in statements.items():
        assert len(statement.encode()) <= MAX_CACHED_STATEMENT_LENGTH, name
