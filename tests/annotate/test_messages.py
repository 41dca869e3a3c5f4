"""Messages (annotate.messages): the storage is built only for a request that uses it, and no message is lost."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils.functional import empty

from tests.labeling.workflow_factories import make_labeler

pytestmark = pytest.mark.django_db

NO_TASKS = "No tasks are waiting for you right now"


def _storage_built(request: object) -> bool:
    return getattr(request, "_messages")._wrapped is not empty  # noqa: B009  (not in the request's type)


def test_a_message_outlives_requests_that_do_not_read_it_and_is_shown_once() -> None:
    client = Client()
    client.force_login(make_labeler().user)
    assert client.post("/next/").status_code == 302  # nothing to hand out: a message for the next page
    for _ in range(2):
        untouched = client.get("/healthz/")
        assert untouched.status_code == 200
        assert not _storage_built(untouched.wsgi_request)  # never built, so nothing stored or dropped
        assert "messages" not in untouched.cookies
    assert NO_TASKS in client.get("/").content.decode()
    assert NO_TASKS not in client.get("/").content.decode()


def test_a_request_that_uses_no_messages_builds_no_storage() -> None:
    client = Client()
    client.force_login(make_labeler().user)
    response = client.get("/healthz/")
    assert not _storage_built(response.wsgi_request)
    page = client.get("/")  # base.html lists the messages: built, read, nothing to store
    assert _storage_built(page.wsgi_request)
