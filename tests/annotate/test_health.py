from __future__ import annotations

import pytest
from django.db import DatabaseError
from django.test import Client


@pytest.mark.django_db
def test_it_answers_ok_without_login(client: Client) -> None:
    response = client.get("/healthz/")
    assert response.status_code == 200
    assert response.content == b"ok\n"


@pytest.mark.django_db
def test_it_answers_503_when_the_database_fails(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise DatabaseError("connection refused")

    monkeypatch.setattr("django.db.backends.utils.CursorWrapper.execute", broken)
    assert client.get("/healthz/").status_code == 503


@pytest.mark.django_db
def test_it_refuses_post(client: Client) -> None:
    assert client.post("/healthz/").status_code == 405
