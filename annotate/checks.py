"""System checks for deployment mistakes the settings file cannot refuse on its own.

Registered by annotate.apps.AnnotateConfig.ready(). The ``deploy`` ones run with
``manage.py check --deploy`` (docs/operations.md, "Security settings").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections

_PER_PROCESS_CACHES = (
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
)


def _on_postgres() -> bool:
    return any(connections[alias].vendor == "postgresql" for alias in settings.DATABASES)


@register(Tags.security)
def check_shared_cache(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    backend = settings.CACHES["default"]["BACKEND"]
    if backend in _PER_PROCESS_CACHES and _on_postgres():
        return [
            Error(
                f"The default cache is {backend.rsplit('.', 1)[-1]}: login and API throttling count per process.",
                hint="Set CACHE_URL=redis://... so every web process shares the counters.",
                id="annotate.E001",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def check_production_cache(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    backend = settings.CACHES["default"]["BACKEND"]
    if _on_postgres() and backend == "django.core.cache.backends.db.DatabaseCache":
        return [
            Warning(
                "The default cache is the database cache: every login attempt and API request writes a row.",
                hint="Set CACHE_URL=redis://... (a Redis database other than the broker's).",
                id="annotate.W002",
            )
        ]
    return []


@register(Tags.security)
def check_debug_on_production_database(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    if settings.DEBUG and _on_postgres():
        return [
            Warning(
                "DEBUG is on with a PostgreSQL DATABASE_URL: error pages show settings and data to anyone.",
                hint="Unset DEBUG outside a developer's machine.",
                id="annotate.W003",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def check_content_security_policy(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    directives = {
        part.split()[0]: part.split()[1:] for part in str(settings.CONTENT_SECURITY_POLICY).split(";") if part.split()
    }
    scripts = directives.get("script-src", directives.get("default-src"))
    if not scripts or any(source in scripts for source in ("'unsafe-inline'", "'unsafe-eval'", "*")):
        return [
            Warning(
                "CONTENT_SECURITY_POLICY does not restrict scripts to our own static files.",
                hint="Keep the default policy (docs/security.md).",
                id="annotate.W004",
            )
        ]
    return []


@register(deploy=True)
def check_production_broker(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    if _on_postgres() and settings.CELERY_BROKER_URL.startswith("filesystem://"):
        return [
            Warning(
                "PostgreSQL with the filesystem Celery broker: workers on other hosts never see the queue.",
                hint="Set CELERY_BROKER_URL=redis://... (docs/operations.md).",
                id="annotate.W005",
            )
        ]
    return []
