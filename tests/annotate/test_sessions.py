"""Sessions read from Redis and written through to the database (annotate.sessions).

A Redis that restarts empty, or cannot be reached at all, signs nobody out:
the database holds every session.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterator

import pytest
import redis
from django.contrib.sessions.models import Session
from django.core.cache import cache
from django.test import Client, override_settings
from django.urls import reverse

from tests.conftest import REQUIRE_FULL_STACK
from tests.labeling.workflow_factories import make_labeler

pytestmark = pytest.mark.django_db

ENGINE = "annotate.sessions"


def _redis_url() -> str:
    # A database of the CI Redis that nothing else uses.
    broker = os.environ.get("CELERY_BROKER_URL", "")
    if not broker.startswith("redis://"):
        if REQUIRE_FULL_STACK:
            pytest.fail("REQUIRE_FULL_STACK=1 but CELERY_BROKER_URL is not redis://")
        pytest.skip("needs Redis: set CELERY_BROKER_URL=redis://... (.ci/run does)")
    parts = urllib.parse.urlparse(broker)
    return urllib.parse.urlunparse(parts._replace(path="/13"))


@pytest.fixture
def redis_sessions() -> Iterator[redis.Redis]:
    url = _redis_url()
    caches = {"default": {"BACKEND": "annotate.cache.RedisCache", "LOCATION": url}}
    client = redis.Redis.from_url(url)
    client.flushdb()
    with override_settings(CACHES=caches, SESSION_ENGINE=ENGINE):
        yield client
    client.flushdb()


def _signed_in() -> Client:
    client = Client()
    client.force_login(make_labeler().user)
    return client


def test_it_keeps_the_session_in_redis_and_in_the_database(redis_sessions: redis.Redis) -> None:
    client = _signed_in()
    key = client.cookies["sessionid"].value
    assert cache.get(f"django.contrib.sessions.cached_db{key}") is not None
    assert Session.objects.filter(session_key=key).exists()
    assert client.get(reverse("home")).status_code == 200


def test_a_redis_that_comes_back_empty_signs_nobody_out(redis_sessions: redis.Redis) -> None:
    client = _signed_in()
    key = client.cookies["sessionid"].value
    redis_sessions.flushdb()  # what a restart of a Redis that keeps nothing on disk leaves

    assert client.get(reverse("home")).status_code == 200
    # Read from the database and put back into the cache for the next request.
    assert cache.get(f"django.contrib.sessions.cached_db{key}") is not None


def test_an_unreachable_redis_falls_back_to_the_database(redis_sessions: redis.Redis) -> None:
    client = _signed_in()
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    gone = {"default": {"BACKEND": "annotate.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}}
    with override_settings(CACHES=gone):
        response = client.get(reverse("home"))
    assert response.status_code == 200
    assert response.wsgi_request.user.is_authenticated
