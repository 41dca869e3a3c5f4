"""The Redis cache backend (annotate.cache): one client per pool, shared by threads, the cache still a cache."""

from __future__ import annotations

import threading

import pytest
import redis
from django.core.cache import caches
from django.test import override_settings

from tests.annotate.test_sessions import _redis_url


@pytest.fixture
def redis_cache():
    url = _redis_url()
    with override_settings(CACHES={"default": {"BACKEND": "annotate.cache.RedisCache", "LOCATION": url}}):
        cache = caches["default"]
        cache.clear()
        yield cache
        cache.clear()


def test_every_call_reuses_one_client_and_one_pool(redis_cache) -> None:
    client = redis_cache._cache.get_client("a")
    assert redis_cache._cache.get_client("b", write=True) is client
    pool = client.connection_pool
    redis_cache.set("k", {"n": 1}, 30)
    assert redis_cache.get("k") == {"n": 1}
    assert redis_cache._cache.get_client() is client
    assert client.connection_pool is pool


def test_threads_share_the_client_and_see_each_others_writes(redis_cache) -> None:
    errors: list[BaseException] = []
    redis_cache.set("counter", 0, 30)

    def work(i: int) -> None:
        try:
            for j in range(50):
                redis_cache.set(f"t{i}-{j}", j, 30)
                assert redis_cache.get(f"t{i}-{j}") == j
                redis_cache.incr("counter")  # atomic in Redis: no increment is lost
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert redis_cache.get("counter") == 8 * 50
    assert redis_cache.get("t7-49") == 49


def test_a_redis_that_cannot_be_reached_fails_loudly() -> None:
    gone = {"default": {"BACKEND": "annotate.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}}
    with override_settings(CACHES=gone), pytest.raises(redis.ConnectionError):
        caches["default"].get("k")
