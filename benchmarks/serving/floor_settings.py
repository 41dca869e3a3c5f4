"""Settings of the floor app (benchmarks.serving.floor): the product's database, cache, sessions and apps.

The apps are loaded once at start (the floor runs the product's candidate
statement, which imports its models); per request only the middleware below runs.
"""

from annotate.settings import *  # noqa: F403
from annotate.settings import DATABASES

# Sessions (read from the same Redis cache, written through to the database)
# and CSRF stay: any implementation of the labeler workflow needs both.
MIDDLEWARE = [
    "benchmarks.serving.probe.RequestCost",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
]
ROOT_URLCONF = "benchmarks.serving.floor"
# The product's template settings stay: the floor renders none, but it is served
# by annotate.wsgi, whose warm-up (annotate.warmup) loads the labeler templates.
# Persistent connections, no health-check ping (a lost connection fails one request).
DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
