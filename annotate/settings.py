"""Settings for the annotate project, read from the environment.

With nothing set, the product runs on its embedded default: SQLite under
``var/`` and a Celery broker on the local filesystem, so ``make run`` needs no
server. Production sets ``DATABASE_URL`` (PostgreSQL) and ``CELERY_BROKER_URL``
(Redis). Every helper below fails loudly on a value it cannot parse: a typo in
a deployment must stop the process, not silently fall back to a default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def envstr(name: str, default: str) -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false, 1/0, yes/no, on/off)")


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def envfloat(name: str, default: float, *, minimum: float | None = None, maximum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ImproperlyConfigured(f"{name}={value} must lie in [{minimum}, {maximum}]")
    return value


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def envpath(name: str, default: Path) -> Path:
    raw = os.environ.get(name)
    return Path(raw).expanduser().resolve() if raw else default


VAR_DIR = envpath("ANNOTATE_VAR_DIR", BASE_DIR / "var")
# Parallel test workers (pytest-xdist) each get a var/ of their own, and so do the
# worker processes they start (they inherit the variable): one worker's
# checkpoints, exports and filesystem broker never meet another's, whose
# database hands out the same ids.
if _XDIST_WORKER := os.environ.get("PYTEST_XDIST_WORKER"):
    VAR_DIR = VAR_DIR / f"test-{_XDIST_WORKER}"

DEBUG = envbool("DEBUG", False)
_DEV_SECRET = "insecure-dev-key-only-for-the-embedded-default-never-in-production"
_PRODUCTION_DB = os.environ.get("DATABASE_URL", "").startswith(("postgres", "postgresql"))
SECRET_KEY = envstr("SECRET_KEY", _DEV_SECRET if DEBUG or not _PRODUCTION_DB else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DATABASE_URL points at a production database")
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "annotate.apps.AnnotateConfig",
    "labeling",
    "activelearn",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "annotate.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # Django's, remembering verified sessions for the key press (annotate.auth.SessionUser).
    "annotate.auth.AuthenticationMiddleware",
    # Django's, building the message storage only for requests that use it (annotate.messages).
    "annotate.messages.LazyMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "annotate.urls"
WSGI_APPLICATION = "annotate.wsgi.application"
ASGI_APPLICATION = "annotate.asgi.application"

TEMPLATES: list[dict[str, Any]] = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]


def _sqlite_config(name: Path | str) -> dict[str, Any]:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": name,
        # The web server and the Celery worker share this file: WAL lets
        # readers proceed during a write, IMMEDIATE takes the write lock at
        # BEGIN so two writers queue on busy_timeout instead of failing with
        # "database is locked" on lock upgrade.
        "OPTIONS": {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        },
        # A file, not memory: tests start real worker processes on it.
        "TEST": {"NAME": VAR_DIR / "test.sqlite3"},
    }


def _database_config() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        return _sqlite_config(VAR_DIR / "annotate.sqlite3")
    if url.startswith("sqlite:"):
        return _sqlite_config(dj_database_url.parse(url)["NAME"])
    try:
        config = dict(dj_database_url.parse(url, conn_max_age=envint("DATABASE_CONN_MAX_AGE", 60, minimum=0)))
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
    if config["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(f"DATABASE_URL must be postgres:// or sqlite://, got engine {config['ENGINE']}")
    # Persistent connections are checked before each request's first query,
    # by looking at the socket rather than a SELECT 1 (annotate.postgresql).
    config["ENGINE"] = "annotate.postgresql"
    config["CONN_HEALTH_CHECKS"] = True
    return config


DATABASES = {"default": _database_config()}
# The hot path's fixed statements are prepared on the server (annotate.postgresql).
# Off behind a pooler that cannot carry prepared statements (docs/operations.md).
DATABASE_PREPARED_STATEMENTS = envbool("DATABASE_PREPARED_STATEMENTS", True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = envpath("STATIC_ROOT", BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
# Tests and runserver serve from the finders; production serves collected files.
WHITENOISE_USE_FINDERS = envbool("WHITENOISE_USE_FINDERS", True)
WHITENOISE_AUTOREFRESH = DEBUG

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# --- Security (docs/security.md) ---------------------------------------------
# Headers are always on; the cookie/HTTPS ones follow SECURE_COOKIES so a
# plain-HTTP local run still works. `manage.py check --deploy` passes with the
# production environment of docs/operations.md ("Security settings").
SECURE_COOKIES = envbool("SECURE_COOKIES", not DEBUG and _PRODUCTION_DB)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
SESSION_COOKIE_HTTPONLY = True
# The token reaches htmx through hx-headers on <body>, never through the cookie.
CSRF_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = envint("SESSION_COOKIE_AGE", 12 * 3600, minimum=300)
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000 if SECURE_COOKIES else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if envbool("BEHIND_TLS_PROXY", False) else None
# Scripts only from our own static files (templates carry no inline <script> and
# no on*= handlers); inline styles stay allowed because KaTeX positions glyphs with
# style attributes. annotate.csp sets the header on every response.
CONTENT_SECURITY_POLICY = envstr(
    "CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'",
)

# Login throttling (labeling.web.auth): counted in the shared cache below.
LOGIN_FAILURES_PER_ADDRESS = envint("LOGIN_FAILURES_PER_ADDRESS", 10, minimum=1)
LOGIN_ADDRESS_WINDOW_S = envint("LOGIN_ADDRESS_WINDOW_S", 15 * 60, minimum=1)
LOGIN_FAILURES_PER_ACCOUNT = envint("LOGIN_FAILURES_PER_ACCOUNT", 30, minimum=1)
LOGIN_ACCOUNT_WINDOW_S = envint("LOGIN_ACCOUNT_WINDOW_S", 3600, minimum=1)
LOGIN_ACCOUNT_SLOW_S = envint("LOGIN_ACCOUNT_SLOW_S", 120, minimum=1)
# A browser that signed in to an account before carries a signed device cookie and is
# judged on its own counter, so slow mode cannot be used to keep the owner out.
LOGIN_FAILURES_PER_DEVICE = envint("LOGIN_FAILURES_PER_DEVICE", 10, minimum=1)
LOGIN_DEVICE_WINDOW_S = envint("LOGIN_DEVICE_WINDOW_S", 15 * 60, minimum=1)
LOGIN_DEVICE_COOKIE_AGE_S = envint("LOGIN_DEVICE_COOKIE_AGE_S", 180 * 24 * 3600, minimum=60)

# The cache holds login and API throttle counters, so every web process must
# see the same one: a per-process LocMemCache would multiply every limit by the
# number of gunicorn workers. Production: CACHE_URL=redis://... (atomic
# counters). Embedded default: the database cache, shared by every process on
# the SQLite file (its table comes from `manage.py createcachetable`, which the
# migrate steps run; the test runner creates it itself).
CACHE_URL = envstr("CACHE_URL", "")
if CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    CACHES: dict[str, dict[str, Any]] = {"default": {"BACKEND": "annotate.cache.RedisCache", "LOCATION": CACHE_URL}}
elif CACHE_URL in ("", "db://"):
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "annotate_cache"}}
elif CACHE_URL == "locmem://":
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
else:
    raise ImproperlyConfigured(f"CACHE_URL={CACHE_URL!r} must be redis://..., db:// or locmem://")
# Every request reads its session. With Redis as the cache, sessions are read
# from it and written through to the database (annotate.sessions), so a Redis
# restart signs nobody out; with the database cache that would only add a
# second read.
SESSION_ENGINE = (
    "annotate.sessions"
    if CACHES["default"]["BACKEND"].endswith("RedisCache")
    else "django.contrib.sessions.backends.db"
)
# --- end of security ----------------------------------------------------------

# The per-request user load as one statement written out once (annotate.auth);
# Django's own backend stays for sessions made before it (it checks no password).
AUTHENTICATION_BACKENDS = ["annotate.auth.ModelBackend", "django.contrib.auth.backends.ModelBackend"]

# --- Celery ---------------------------------------------------------------
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", "filesystem://")
_BROKER_DIR = envpath("CELERY_BROKER_DIR", VAR_DIR / "broker")
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (_BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
        "data_folder_in": str(_BROKER_DIR / "queue"),
        "data_folder_out": str(_BROKER_DIR / "queue"),
        "processed_folder": str(_BROKER_DIR / "processed"),
        # Broadcast (remote control) exchanges; the default is ./control.
        "control_folder": str(_BROKER_DIR / "control"),
        "store_processed": False,
    }
else:
    # Longer than the longest step (a training run), or Redis would hand an
    # unacknowledged long task to a second worker while the first still runs.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 6 * 3600, minimum=60)}
# Durable state lives in our own tables (generations, export jobs); results
# are not needed from the broker.
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# GPU work (training, scoring) runs on one-process-per-GPU workers; everything else on
# the CPU fleet. Tests send to a private queue explicitly, which overrides these.
CELERY_TASK_ROUTES = {
    "activelearn.tasks.train_checkpoint_task": {"queue": "gpu"},
    "activelearn.tasks.score_chunk_task": {"queue": "gpu"},
    "activelearn.tasks.grade_chunk_task": {"queue": "cpu"},
    "activelearn.tasks.evaluate_checkpoint_task": {"queue": "cpu"},
}

# --- Models and files -----------------------------------------------------
# Where trained PRM checkpoints go, and where backbones may be read from.
CHECKPOINT_DIR = envpath("CHECKPOINT_DIR", VAR_DIR / "checkpoints")
MODEL_DIR = envpath("MODEL_DIR", VAR_DIR / "models")
EXPORT_DIR = envpath("EXPORT_DIR", VAR_DIR / "exports")
# SmolLM2's middle layer (the small_causal recipe): step AUROC 0.81 on CHAMP against MiniLM's
# 0.70, in about 300 CPU-s of training from scratch on 2 cores (docs/prm.md).
PRM_BACKBONE = envstr("PRM_BACKBONE", "builtin:smollm2")
# Where a frozen backbone's output at the step separators is kept (one SQLite file), so
# retraining a head-only PRM or ORM and rescoring with it skip the forward passes already
# made (activelearn/prm/feature_cache.py). On by default: without it every generation's
# retraining runs the backbone again over every label (SmolLM2 on CHAMP's 444 training and
# validation solutions: 548 CPU-s, against 45 with the cache). "off" switches it off.
_FEATURE_CACHE_OFF = os.environ.get("PRM_FEATURE_CACHE_DIR", "").strip().lower() == "off"
PRM_FEATURE_CACHE_DIR = None if _FEATURE_CACHE_OFF else envpath("PRM_FEATURE_CACHE_DIR", VAR_DIR / "feature-cache")

# --- Labeling -------------------------------------------------------------
LEASE_SECONDS = envint("LEASE_SECONDS", 30 * 60, minimum=60)
IDLE_GAP_SECONDS = envint("IDLE_GAP_SECONDS", 5 * 60, minimum=1)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "labeling.api.authentication.PasswordBoundTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Counted in the shared cache (see CACHES). A labeler clicks a few ratings a
    # second at most; scripts get a clear 429 with Retry-After beyond these.
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": envstr("API_THROTTLE_ANON", "30/minute"),
        "user": envstr("API_THROTTLE_USER", "600/minute"),
    },
}
SPECTACULAR_SETTINGS = {"TITLE": "annotate API", "VERSION": "1.0.0"}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}

# --- Quality control (labeling.quality.control, labeling.work.queue; docs/quality.md) ---
# The screening set: the first N open screening tasks of generation -1, in
# queue order; every new labeler labels all of them before anything else.
SCREENING_SET_SIZE = envint("SCREENING_SET_SIZE", 30, minimum=1)
# Share of screening solutions that must agree with gold to be admitted.
SCREENING_PASS_THRESHOLD = envfloat("SCREENING_PASS_THRESHOLD", 0.75, minimum=0.0, maximum=1.0)
# Probability that a next-task call serves an unseen QC item instead of normal work.
QC_RATE = envfloat("QC_RATE", 0.1, minimum=0.0, maximum=1.0)
# Bounds on the QC pool of one generation (quality_control_set_create).
QC_ITEMS_MIN = envint("QC_ITEMS_MIN", 10, minimum=1)
QC_ITEMS_MAX = envint("QC_ITEMS_MAX", 20, minimum=1)
# Rolling quality: the last QC_WINDOW QC items since the labeler was last
# admitted or reinstated; judged once at least QC_MIN_ITEMS are in it.
QC_WINDOW = envint("QC_WINDOW", 20, minimum=1)
QC_MIN_ITEMS = envint("QC_MIN_ITEMS", 10, minimum=1)
# Suspended automatically when rolling agreement falls below this.
QC_SUSPEND_BELOW = envfloat("QC_SUSPEND_BELOW", 0.6, minimum=0.0, maximum=1.0)
# Share of normal tasks labeled by two people (inter-annotator agreement).
OVERLAP_SHARE = envfloat("OVERLAP_SHARE", 0.1, minimum=0.0, maximum=1.0)

# --- Step generation (phase 1 candidate next steps; docs/step-generation.md) ----
# "openai": an OpenAI-compatible /v1/completions server (vLLM); "local": a causal LM
# directory loaded in the GPU worker; "none": no candidates are generated.
STEPGEN_BACKEND = envstr("STEPGEN_BACKEND", "none")
if STEPGEN_BACKEND not in {"openai", "local", "none"}:
    raise ImproperlyConfigured(f"STEPGEN_BACKEND={STEPGEN_BACKEND!r} must be openai, local or none")
STEPGEN_OPENAI_BASE_URL = envstr("STEPGEN_OPENAI_BASE_URL", "")
STEPGEN_OPENAI_MODEL = envstr("STEPGEN_OPENAI_MODEL", "")
STEPGEN_OPENAI_API_KEY = envstr("STEPGEN_OPENAI_API_KEY", "")
if STEPGEN_BACKEND == "openai" and not (STEPGEN_OPENAI_BASE_URL and STEPGEN_OPENAI_MODEL):
    raise ImproperlyConfigured("STEPGEN_BACKEND=openai needs STEPGEN_OPENAI_BASE_URL and STEPGEN_OPENAI_MODEL")
STEPGEN_LOCAL_MODEL_DIR = envstr("STEPGEN_LOCAL_MODEL_DIR", "")
if STEPGEN_BACKEND == "local" and not STEPGEN_LOCAL_MODEL_DIR:
    raise ImproperlyConfigured("STEPGEN_BACKEND=local needs STEPGEN_LOCAL_MODEL_DIR")
STEPGEN_LOCAL_DEVICE = envstr("STEPGEN_LOCAL_DEVICE", "")  # "" = cuda when available
STEPGEN_PROMPT_TEMPLATE_FILE = envstr("STEPGEN_PROMPT_TEMPLATE_FILE", "")  # "" = "{problem}\n\n{steps}"
STEPGEN_K = envint("STEPGEN_K", 4, minimum=1)
STEPGEN_TEMPERATURE = envfloat("STEPGEN_TEMPERATURE", 1.0, minimum=0.0, maximum=2.0)
STEPGEN_TOP_P = envfloat("STEPGEN_TOP_P", 1.0, minimum=0.01, maximum=1.0)
STEPGEN_MAX_TOKENS = envint("STEPGEN_MAX_TOKENS", 256, minimum=1)
STEPGEN_SEED = envint("STEPGEN_SEED", 0) if envstr("STEPGEN_SEED", "") else None
STEPGEN_TIMEOUT_S = envfloat("STEPGEN_TIMEOUT_S", 30.0, minimum=0.1)
STEPGEN_RETRIES = envint("STEPGEN_RETRIES", 2, minimum=0)
STEPGEN_QUEUE = envstr("STEPGEN_QUEUE", "gpu" if STEPGEN_BACKEND == "local" else "cpu")
# A slot pending longer than this is taken to be lost (worker died) and is re-queued.
STEPGEN_PENDING_TIMEOUT_S = envint("STEPGEN_PENDING_TIMEOUT_S", 10 * 60, minimum=1)
STEPGEN_CANDIDATE_STORE = envstr("STEPGEN_CANDIDATE_STORE", "labeling.work.candidates.DatabaseCandidateStore")
# --- end of step generation ---------------------------------------------------

# --- Sampling (a generation's own pool; activelearn.generations.sampling) -------
# Asked for by a generation's sample_n (N solutions per problem, docs/operations.md
# "Sampling"). "openai": an OpenAI-compatible /v1/completions server (vLLM, SGLang,
# llama.cpp's server); "local": a causal LM loaded in the GPU worker; "none": off.
SAMPLING_BACKEND = envstr("SAMPLING_BACKEND", "none")
if SAMPLING_BACKEND not in {"openai", "local", "none"}:
    raise ImproperlyConfigured(f"SAMPLING_BACKEND={SAMPLING_BACKEND!r} must be openai, local or none")
SAMPLING_OPENAI_BASE_URL = envstr("SAMPLING_OPENAI_BASE_URL", "")
SAMPLING_OPENAI_MODEL = envstr("SAMPLING_OPENAI_MODEL", "")
SAMPLING_OPENAI_API_KEY = envstr("SAMPLING_OPENAI_API_KEY", "")
if SAMPLING_BACKEND == "openai" and not (SAMPLING_OPENAI_BASE_URL and SAMPLING_OPENAI_MODEL):
    raise ImproperlyConfigured("SAMPLING_BACKEND=openai needs SAMPLING_OPENAI_BASE_URL and SAMPLING_OPENAI_MODEL")
SAMPLING_LOCAL_MODEL_DIR = envstr("SAMPLING_LOCAL_MODEL_DIR", "")  # a model directory or builtin:smollm2
if SAMPLING_BACKEND == "local" and not SAMPLING_LOCAL_MODEL_DIR:
    raise ImproperlyConfigured("SAMPLING_BACKEND=local needs SAMPLING_LOCAL_MODEL_DIR")
SAMPLING_LOCAL_DEVICE = envstr("SAMPLING_LOCAL_DEVICE", "")  # "" = cuda when available
SAMPLING_PROMPT_TEMPLATE_FILE = envstr("SAMPLING_PROMPT_TEMPLATE_FILE", "")  # "" = "{problem}\n\n{steps}"
SAMPLING_TEMPERATURE = envfloat("SAMPLING_TEMPERATURE", 1.0, minimum=0.0, maximum=2.0)
SAMPLING_TOP_P = envfloat("SAMPLING_TOP_P", 1.0, minimum=0.01, maximum=1.0)
SAMPLING_MAX_TOKENS = envint("SAMPLING_MAX_TOKENS", 1024, minimum=1)
# Unset: the server's own randomness. Set: each problem's draws are seeded from it, the
# generation number and the problem, so a retry redraws the same texts.
SAMPLING_SEED = envint("SAMPLING_SEED", 0) if envstr("SAMPLING_SEED", "") else None
# Per request: a whole solution at max_tokens can take minutes on a busy server.
SAMPLING_TIMEOUT_S = envfloat("SAMPLING_TIMEOUT_S", 300.0, minimum=0.1)
SAMPLING_RETRIES = envint("SAMPLING_RETRIES", 3, minimum=0)
SAMPLING_BACKOFF_S = envfloat("SAMPLING_BACKOFF_S", 1.0, minimum=0.0)
# Requests in flight per worker (HTTP): problems are asked for concurrently so that the
# server can batch them; the local backend samples one problem at a time.
SAMPLING_CONCURRENCY = envint("SAMPLING_CONCURRENCY", 8, minimum=1)
# --- end of sampling ----------------------------------------------------------

# --- Generation pipeline (activelearn.generations; docs/active-learning.md) ------
# Queues the pipeline sends its own tasks to. Explicit on every enqueue (the pipeline
# fans out follow-up tasks itself), so tests point both at a private queue.
PIPELINE_GPU_QUEUE = envstr("PIPELINE_GPU_QUEUE", "gpu")
PIPELINE_CPU_QUEUE = envstr("PIPELINE_CPU_QUEUE", "cpu")
# Pool solutions per scoring chunk (one GPU task), and per upsert + heartbeat inside it.
PIPELINE_SCORE_CHUNK_SIZE = envint("PIPELINE_SCORE_CHUNK_SIZE", 2000, minimum=1)
PIPELINE_SCORE_BATCH = envint("PIPELINE_SCORE_BATCH", 256, minimum=1)
# The default of GenerationConfig.per_problem_cap: never-served pool solutions scored per
# problem (0: all). Scoring is a forward pass per solution; on a CPU (make run) scoring
# every one of the demo's 12,000 pool solutions takes hours, so run-embedded.sh sets 2.
PIPELINE_POOL_PER_PROBLEM = envint("PIPELINE_POOL_PER_PROBLEM", 0, minimum=0)
# Problems per sampling chunk (one task on the cpu queue, gpu for the local backend).
PIPELINE_SAMPLE_CHUNK_PROBLEMS = envint("PIPELINE_SAMPLE_CHUNK_PROBLEMS", 50, minimum=1)
# Solutions graded per page (one heartbeat each).
PIPELINE_GRADE_PAGE = envint("PIPELINE_GRADE_PAGE", 200, minimum=1)
# Recovery from a dead worker (activelearn.generations.liveness, docs/operations.md "Recovery"): a
# claimed step or chunk is refreshed by its worker's pulse thread every
# PIPELINE_HEARTBEAT_EVERY_S, whatever the work is doing; older than
# PIPELINE_HEARTBEAT_STALE_S it belongs to a dead worker and the reconciler (every
# PIPELINE_RECONCILE_EVERY_S, and at every worker start) hands it on. With the defaults a
# killed worker's step is running again within stale + reconcile period = 90 s. A worker
# that lives but makes no progress for PIPELINE_STALL_S (hung) stops its pulse, so its
# claim goes stale then.
PIPELINE_HEARTBEAT_EVERY_S = envint("PIPELINE_HEARTBEAT_EVERY_S", 10, minimum=1)
PIPELINE_HEARTBEAT_STALE_S = envint("PIPELINE_HEARTBEAT_STALE_S", 60, minimum=1)
PIPELINE_STALL_S = envint("PIPELINE_STALL_S", 15 * 60, minimum=1)
if PIPELINE_HEARTBEAT_STALE_S < 2 * PIPELINE_HEARTBEAT_EVERY_S:
    raise ImproperlyConfigured(
        f"PIPELINE_HEARTBEAT_STALE_S ({PIPELINE_HEARTBEAT_STALE_S}) must be at least two heartbeats "
        f"(2 x PIPELINE_HEARTBEAT_EVERY_S = {2 * PIPELINE_HEARTBEAT_EVERY_S}), or a live worker looks dead"
    )
# A step (or chunk) claimed this many times without finishing fails the generation
# instead of being re-enqueued forever (e.g. killed by its hard time limit every time).
PIPELINE_MAX_ATTEMPTS = envint("PIPELINE_MAX_ATTEMPTS", 3, minimum=1)
PIPELINE_RECONCILE_EVERY_S = envint("PIPELINE_RECONCILE_EVERY_S", 30, minimum=1)
# A worker consuming a pipeline queue reconciles when it starts and once more a stale
# interval later (activelearn.generations.reconciler.pipeline_reconcile_at_worker_start).
PIPELINE_RECONCILE_AT_WORKER_START = envbool("PIPELINE_RECONCILE_AT_WORKER_START", True)
# Soft time limits per task kind; the hard limit is 5 minutes later. Enforced by prefork
# workers only (the solo pool of GPU workers ignores them; heartbeats cover those).
PIPELINE_TRAIN_TIME_LIMIT_S = envint("PIPELINE_TRAIN_TIME_LIMIT_S", 5 * 3600, minimum=60)
PIPELINE_SCORE_TIME_LIMIT_S = envint("PIPELINE_SCORE_TIME_LIMIT_S", 3600, minimum=60)
PIPELINE_CPU_TIME_LIMIT_S = envint("PIPELINE_CPU_TIME_LIMIT_S", 2 * 3600, minimum=60)
PIPELINE_HARD_LIMIT_GRACE_S = 300
if not CELERY_BROKER_URL.startswith("filesystem://"):
    _longest = max(PIPELINE_TRAIN_TIME_LIMIT_S, PIPELINE_SCORE_TIME_LIMIT_S, PIPELINE_CPU_TIME_LIMIT_S)
    if _longest + PIPELINE_HARD_LIMIT_GRACE_S >= CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]:
        raise ImproperlyConfigured(
            "CELERY_VISIBILITY_TIMEOUT must be longer than the longest pipeline task "
            f"({_longest + PIPELINE_HARD_LIMIT_GRACE_S} s with its hard limit), or Redis redelivers it mid-run"
        )
# Automatic cadence (pipeline_cadence_task on beat), both off by default: start the next
# generation when the newest open one has fewer open normal tasks than this (0 = off),
# and/or when the newest one was started this many seconds ago (0 = off).
PIPELINE_AUTO_START_BELOW_OPEN_TASKS = envint("PIPELINE_AUTO_START_BELOW_OPEN_TASKS", 0, minimum=0)
PIPELINE_AUTO_START_EVERY_S = envint("PIPELINE_AUTO_START_EVERY_S", 0, minimum=0)
# GenerationConfig as JSON for automatic starts (validated when a start happens).
PIPELINE_AUTO_START_CONFIG = envstr("PIPELINE_AUTO_START_CONFIG", "{}")
PIPELINE_CADENCE_EVERY_S = envint("PIPELINE_CADENCE_EVERY_S", 300, minimum=1)

CELERY_TASK_ROUTES.update(
    {
        "activelearn.tasks.generation_train_task": {"queue": PIPELINE_GPU_QUEUE},
        "activelearn.tasks.generation_score_chunk_task": {"queue": PIPELINE_GPU_QUEUE},
        "activelearn.tasks.generation_sample_task": {"queue": PIPELINE_CPU_QUEUE},
        # The pipeline sends it to PIPELINE_GPU_QUEUE instead with SAMPLING_BACKEND=local.
        "activelearn.tasks.generation_sample_chunk_task": {"queue": PIPELINE_CPU_QUEUE},
        "activelearn.tasks.generation_prepare_task": {"queue": PIPELINE_CPU_QUEUE},
        "activelearn.tasks.generation_grade_task": {"queue": PIPELINE_CPU_QUEUE},
        "activelearn.tasks.generation_select_task": {"queue": PIPELINE_CPU_QUEUE},
        "activelearn.tasks.pipeline_reconcile_task": {"queue": PIPELINE_CPU_QUEUE},
        "activelearn.tasks.pipeline_cadence_task": {"queue": PIPELINE_CPU_QUEUE},
    }
)
# Run exactly one `celery -A annotate beat` (default file scheduler): two would send
# every entry twice. The reconciler is harmless to run twice; the cadence task would be
# too (generation_start refuses a second running generation), but once is the contract.
CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "pipeline-reconcile": {
        "task": "activelearn.tasks.pipeline_reconcile_task",
        "schedule": float(PIPELINE_RECONCILE_EVERY_S),
        "options": {"queue": PIPELINE_CPU_QUEUE, "expires": float(PIPELINE_RECONCILE_EVERY_S)},
    },
}
if PIPELINE_AUTO_START_BELOW_OPEN_TASKS or PIPELINE_AUTO_START_EVERY_S:
    CELERY_BEAT_SCHEDULE["pipeline-cadence"] = {
        "task": "activelearn.tasks.pipeline_cadence_task",
        "schedule": float(PIPELINE_CADENCE_EVERY_S),
        "options": {"queue": PIPELINE_CPU_QUEUE, "expires": float(PIPELINE_CADENCE_EVERY_S)},
    }
# --- end of generation pipeline -----------------------------------------------
