"""A private stack for fault tests: its own PostgreSQL cluster and its own Redis.

Fault tests restart PostgreSQL and Redis and SIGKILL servers and workers, so they never
touch the shared services that DATABASE_URL and CELERY_BROKER_URL point at: each session
starts a throw-away cluster (``initdb`` into a temp dir, port 55432, socket in the temp
dir) and each test a throw-away Redis (port 56379, no persistence). Every process under
test (gunicorn, celery, management commands, ``tests.faults.scenario``) runs as a child
with DATABASE_URL pointing at a database of the private cluster, cloned from a migrated
template; the pytest process reads that database with plain psycopg, never the ORM.

Skipped when the PostgreSQL or Redis binaries are missing, unless REQUIRE_FULL_STACK=1
(.ci/run), where that is a failure.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

ROOT = Path(settings.BASE_DIR)
REQUIRE_FULL_STACK = os.environ.get("REQUIRE_FULL_STACK") == "1"
# Under pytest-xdist each worker takes ports of its own (gw0 the base ports, gw1
# the next ones) and its own private cluster; the tests themselves still run
# one at a time (one_fault_test_at_a_time), since their timings assume the
# machine is not also running another kill-and-recover scenario.
WORKER_INDEX = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or "0")
BASE_PG_PORT = int(os.environ.get("FAULT_PG_PORT", "55432"))
PG_PORT = BASE_PG_PORT + WORKER_INDEX
REDIS_PORT = int(os.environ.get("FAULT_REDIS_PORT", "56379")) + WORKER_INDEX
GUNICORN_PORT = 58765 + WORKER_INDEX
TEMPLATE_DB = "annotate_fault_template"
SECRET_KEY = "fault-tests-only-secret-key-0123456789abcdefghijklmnop"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "faults: kills or restarts servers, workers, PostgreSQL or Redis (private)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).parent == here:
            item.add_marker(pytest.mark.faults)
            item.add_marker(pytest.mark.slow)


def _missing(reason: str) -> None:
    if REQUIRE_FULL_STACK:
        pytest.fail(f"REQUIRE_FULL_STACK=1 but {reason}")
    pytest.skip(reason)


def _pg_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def wait_for(condition: Callable[[], Any], *, timeout: float, what: str, poll: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def kill_group(process: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> None:
    """Signal a child started with start_new_session=True and all its children."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        kill_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            kill_group(process)
            process.wait()


# --- PostgreSQL ---------------------------------------------------------------------------


@dataclass
class PrivatePostgres:
    data_dir: Path
    socket_dir: Path
    port: int
    pg_ctl: str
    log: Path
    as_postgres: list[str] = field(default_factory=list)

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def ctl(self, *args: str) -> None:
        subprocess.run(
            [*self.as_postgres, self.pg_ctl, "-D", str(self.data_dir), "-l", str(self.log), "-w", "-t", "60", *args],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip

    def start(self) -> None:
        self.ctl("-o", f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self, mode: str = "fast") -> None:
        self.ctl("-m", mode, "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def execute(self, sql: str, *, dbname: str = "postgres") -> None:
        with connect(self.url(dbname)) as db:
            db.execute(sql)


def connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=5)


def child_env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "DJANGO_SETTINGS_MODULE")
    }
    return env | {
        "DJANGO_SETTINGS_MODULE": "annotate.settings",
        "SECRET_KEY": SECRET_KEY,
        "DEBUG": "false",
        "SECURE_COOKIES": "false",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
        **extra,
    }


@pytest.fixture(autouse=True)
def one_fault_test_at_a_time() -> Iterator[None]:
    """A lock shared by the xdist workers of one run (keyed by the base port)."""
    with open(Path(tempfile.gettempdir()) / f"annotate-fault-tests-{BASE_PG_PORT}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def private_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivatePostgres]:
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        _missing("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    assert initdb and pg_ctl
    if not port_free(PG_PORT):
        pytest.fail(f"port {PG_PORT} is taken; set FAULT_PG_PORT to a free one")
    # initdb refuses to run as root: the cluster belongs to the postgres user then.
    base = Path(tempfile.mkdtemp(prefix="annotate-fault-pg-"))
    as_postgres: list[str] = []
    if os.geteuid() == 0:
        as_postgres = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres", "postgres")
    data_dir, socket_dir, log = base / "data", base, base / "postgres.log"
    subprocess.run(
        [*as_postgres, initdb, "-D", str(data_dir), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    cluster = PrivatePostgres(data_dir, socket_dir, PG_PORT, pg_ctl, log, as_postgres)
    cluster.start()
    try:
        cluster.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
        env = child_env(DATABASE_URL=cluster.url(TEMPLATE_DB))
        for command in (["migrate", "--no-input", "-v", "0"], ["createcachetable"]):
            subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True)
        yield cluster
    finally:
        try:
            cluster.stop("immediate")
        finally:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def fault_db(private_postgres: PrivatePostgres) -> Iterator[str]:
    """DATABASE_URL of a fresh, migrated database on the private cluster."""
    name = f"annotate_fault_{uuid.uuid4().hex[:8]}"
    private_postgres.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"')
    yield private_postgres.url(name)
    # The cluster may be down after a failed restart test.
    with contextlib.suppress(Exception):
        private_postgres.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- Redis --------------------------------------------------------------------------------


@dataclass
class PrivateRedis:
    port: int
    dir: Path
    binary: str

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        subprocess.run(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--daemonize", "yes", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--logfile", str(self.dir / "redis.log"),
             "--pidfile", str(self.dir / "redis.pid")],
            check=True,
        )  # fmt: skip
        wait_for(self.ping, timeout=10, what="private redis")

    def stop(self) -> None:
        """``shutdown nosave``: every queued message is gone, as after a crash."""
        subprocess.run(
            ["redis-cli", "-p", str(self.port), "shutdown", "nosave"], check=False, capture_output=True, timeout=10
        )
        wait_for(lambda: port_free(self.port), timeout=10, what="redis to stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def ping(self) -> bool:
        out = subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True, check=False)
        return out.stdout.strip() == "PONG"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if not binary or not shutil.which("redis-cli"):
        _missing("redis-server / redis-cli are not installed")
    assert binary
    if not port_free(REDIS_PORT):
        pytest.fail(f"port {REDIS_PORT} is taken; set FAULT_REDIS_PORT to a free one")
    redis = PrivateRedis(REDIS_PORT, tmp_path, binary)
    redis.start()
    try:
        yield redis
    finally:
        if not port_free(REDIS_PORT):
            redis.stop()


# --- processes under test -----------------------------------------------------------------


def scenario(database_url: str, command: str, *, timeout: float = 180, **kwargs: Any) -> Any:
    """Run ``tests.faults.scenario <command>`` against the private database; its JSON answer."""
    env = child_env(DATABASE_URL=database_url, **kwargs.pop("env", {}))
    out = subprocess.run(
        [sys.executable, "-m", "tests.faults.scenario", command, json.dumps(kwargs)],
        cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert out.returncode == 0, f"scenario {command} failed:\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def static_root(tmp_path_factory: pytest.TempPathFactory, private_postgres: PrivatePostgres) -> Path:
    """collectstatic once: DEBUG is off, so pages need the hashed manifest."""
    root = tmp_path_factory.mktemp("static")
    env = child_env(DATABASE_URL=private_postgres.url(TEMPLATE_DB), STATIC_ROOT=str(root))
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--no-input", "-v", "0"], cwd=ROOT, env=env,
                   check=True)  # fmt: skip
    return root


@dataclass
class Gunicorn:
    port: int
    args: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert port_free(self.port), f"port {self.port} still taken"
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                self.args, cwd=ROOT, env=self.env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_for(self._up, timeout=60, what=f"gunicorn on {self.port}:\n{self.output()}", poll=0.2)

    def _up(self) -> bool:
        import http.client

        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"gunicorn exited:\n{self.output()}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/healthz/", headers={"Host": "localhost"})
            return conn.getresponse().status < 500
        except OSError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        kill_group(self.process)
        self.process.wait()
        wait_for(lambda: port_free(self.port), timeout=10, what="the killed server's port")

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def gunicorn(tmp_path: Path, static_root: Path) -> Iterator[Callable[..., Gunicorn]]:
    servers: list[Gunicorn] = []

    def make(database_url: str, *, app: str = "annotate.wsgi", workers: int = 2, threads: int = 4,
             port: int = GUNICORN_PORT, **env: str) -> Gunicorn:  # fmt: skip
        args = [str(Path(sys.executable).parent / "gunicorn"), app, "-w", str(workers), "--worker-class", "gthread",
                "--threads", str(threads), "-b", f"127.0.0.1:{port}", "--log-level", "warning",
                "--graceful-timeout", "5", "--timeout", "60"]  # fmt: skip
        environment = child_env(
            DATABASE_URL=database_url, STATIC_ROOT=str(static_root), CACHE_URL="locmem://",
            ANNOTATE_VAR_DIR=str(tmp_path / "var"), **env,
        )  # fmt: skip
        server = Gunicorn(port, args, environment, tmp_path / f"gunicorn-{len(servers)}.log")
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@dataclass
class Worker:
    process: subprocess.Popen[str]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def celery_worker(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(database_url: str, broker_url: str, queue: str, **env: str) -> Worker:
        log = tmp_path / f"worker-{len(workers)}.log"
        environment = child_env(**{
            "ANNOTATE_VAR_DIR": str(tmp_path / "var"), "LOG_LEVEL": "INFO", **env, "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": broker_url, "PIPELINE_GPU_QUEUE": queue, "PIPELINE_CPU_QUEUE": queue,
        })  # fmt: skip
        with log.open("w") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "annotate", "worker", "-Q", queue, "--pool=solo",
                 "--without-heartbeat", "--without-gossip", "--without-mingle", "--loglevel=INFO",
                 f"--hostname=fault{len(workers)}@%h"],
                stdout=sink, stderr=subprocess.STDOUT, env=environment, text=True, cwd=ROOT, start_new_session=True,
            )  # fmt: skip
        worker = Worker(process, log)
        workers.append(worker)
        wait_for(lambda: "ready." in worker.output() or process.poll() is not None, timeout=60, what="celery worker")
        assert process.poll() is None, f"celery worker did not start:\n{worker.output()}"
        return worker

    yield start
    for worker in workers:
        stop(worker.process)
