"""The deploy check that autovacuum keeps the queue tables clean (PostgreSQL; nothing to say elsewhere)."""

from __future__ import annotations

import importlib

import pytest
from django.core.checks import CheckMessage, run_checks
from django.db import connection

from labeling.checks import QUEUE_TABLE_AUTOVACUUM, check_queue_autovacuum

pytestmark = pytest.mark.django_db
on_postgres = pytest.mark.skipif(connection.vendor != "postgresql", reason="autovacuum is PostgreSQL's")


def _ids(messages: list[CheckMessage]) -> list[str]:
    return sorted(str(m.id) for m in messages)


def _server_autovacuum() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        return str(cursor.fetchone()[0])


def test_the_migration_sets_the_values_the_check_asks_for():
    migration = importlib.import_module("labeling.migrations.0017_queue_tables_autovacuum")
    assert migration.SETTINGS == QUEUE_TABLE_AUTOVACUUM


@on_postgres
def test_a_migrated_database_warns_only_if_the_server_runs_no_autovacuum():
    messages = check_queue_autovacuum(None, databases=["default"])
    # The cluster-wide switch cannot be flipped from a test: the check must agree with the server.
    assert _ids(messages) == ([] if _server_autovacuum() == "on" else ["labeling.W001"])


@on_postgres
def test_it_warns_when_the_statistics_autovacuum_needs_are_not_collected():
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL track_counts = off")  # rolled back with the test's transaction
    messages = check_queue_autovacuum(None, databases=["default"])
    assert _ids(messages) == ["labeling.W001"]
    assert "track_counts = off" in messages[0].msg


@on_postgres
def test_it_names_a_queue_table_whose_autovacuum_is_turned_off():
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE labeling_task SET (autovacuum_enabled = off)")
    warnings = [m for m in check_queue_autovacuum(None, databases=["default"]) if m.id == "labeling.W002"]
    assert len(warnings) == 1
    assert "labeling_task" in warnings[0].msg and "autovacuum_enabled = off" in warnings[0].msg


@on_postgres
def test_it_lists_the_thresholds_a_queue_table_lost():
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE labeling_assignment RESET (autovacuum_vacuum_threshold)")
        cursor.execute("ALTER TABLE labeling_task SET (autovacuum_vacuum_scale_factor = 0.2)")
    warnings = sorted(m.msg for m in check_queue_autovacuum(None, databases=["default"]) if m.id == "labeling.W002")
    assert len(warnings) == 2
    assert "labeling_assignment" in warnings[0] and "wants at most: autovacuum_vacuum_threshold = 1000" in warnings[0]
    assert "labeling_task" in warnings[1] and "autovacuum_vacuum_scale_factor = 0" in warnings[1]


@on_postgres
def test_a_queue_table_vacuumed_more_often_still_is_fine():
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE labeling_task SET (autovacuum_vacuum_threshold = 200)")
    assert "labeling.W002" not in _ids(check_queue_autovacuum(None, databases=["default"]))


@on_postgres
def test_it_runs_with_the_deploy_checks_only():
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE labeling_task SET (autovacuum_enabled = off)")
    assert "labeling.W002" in _ids(run_checks(include_deployment_checks=True, databases=["default"]))
    assert "labeling.W002" not in _ids(run_checks(databases=["default"]))
    # Without --database, like Django's database checks, it reads nothing.
    assert "labeling.W002" not in _ids(run_checks(include_deployment_checks=True))


@pytest.mark.skipif(connection.vendor == "postgresql", reason="the other databases")
def test_it_has_nothing_to_say_about_another_database():
    assert check_queue_autovacuum(None, databases=["default"]) == []
