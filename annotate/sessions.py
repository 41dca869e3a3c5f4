"""Sessions read from the cache (Redis) and written through to the database.

Django's cached_db store, except that a cache that is down does not take the
site down with it: a read falls back to the database, which holds every
session. Deleting (sign-out) still fails loudly when the cache cannot be
reached, so a signed-out session can never live on in a cache that comes back.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.sessions.backends.cached_db import SessionStore as CachedDBStore
from django.contrib.sessions.backends.db import SessionStore as DBStore
from django.core.cache import BaseCache, caches

logger = logging.getLogger(__name__)


class SessionStore(CachedDBStore):
    @property
    def _shared_cache(self) -> BaseCache:
        return caches[settings.SESSION_CACHE_ALIAS]

    def load(self) -> dict[str, Any]:
        try:
            data = self._shared_cache.get(self.cache_key)
        except Exception:  # the cache is unreachable, or the key is not valid for it
            logger.warning("session cache unavailable; reading the session from the database", exc_info=True)
            return self._load_from_db(refill=False)
        if data is not None:
            return dict(data)
        return self._load_from_db(refill=True)

    def _load_from_db(self, *, refill: bool) -> dict[str, Any]:
        stored = DBStore._get_session_from_db(self)  # type: ignore[attr-defined]  # not in the stubs
        if not stored:
            return {}
        data: dict[str, Any] = self.decode(stored.session_data)
        if refill:
            try:
                self._shared_cache.set(self.cache_key, data, self.get_expiry_age(expiry=stored.expire_date))
            except Exception:
                logger.warning("could not refill the session cache", exc_info=True)
        return data
