"""How long a fresh web worker takes to answer its first request, and its second, after it has booted.

    .venv/bin/python benchmarks/first_request.py [--baseline CHECKOUT] [--rounds 3] [--path /login/]

Starts gunicorn with one worker on the embedded default (a SQLite file in a
temporary directory, migrated once; nothing else needed), waits until the
worker has booted (``--boot-wait`` seconds after the port accepts), then times
GET ``--path`` twice. What a labeler meets after a deploy, a restart, or a
worker replaced by ``--max-requests``: the first answer includes whatever the
process loads on its first request (the URLconf with every view, the
templates). With ``--baseline``, the same for another checkout, alternating;
medians are printed.
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")


def _get(port: int, path: str) -> float:
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    if response.status != 200:
        raise SystemExit(f"GET {path} answered {response.status}")
    conn.close()
    return (time.perf_counter() - start) * 1000


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def measure(root: Path, env: dict[str, str], port: int, path: str, boot_wait: float) -> tuple[float, float]:
    server = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "gunicorn"), "annotate.wsgi", "-w", "1", "-b", f"127.0.0.1:{port}",
         "--log-level", "warning"],
        cwd=root, env=env,
    )  # fmt: skip
    try:
        for _ in range(200):
            if _accepts(port):
                break
            time.sleep(0.05)
        time.sleep(boot_wait)
        return _get(port, path), _get(port, path)
    finally:
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", metavar="CHECKOUT", help="also measure this checkout, alternating")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--path", default="/login/")
    parser.add_argument("--port", type=int, default=44060)
    parser.add_argument("--boot-wait", type=float, default=5.0, help="seconds after the port accepts")
    args = parser.parse_args()
    var = Path(tempfile.mkdtemp(prefix="first-request-"))
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL"}}
    env |= {"ANNOTATE_VAR_DIR": str(var), "STATIC_ROOT": str(var / "static"), "DEBUG": "false",
            "SECRET_KEY": env.get("SECRET_KEY", "first-request-benchmark-secret-key-0123456789abcdef")}  # fmt: skip
    subprocess.run([PY, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    checkouts = {"product": ROOT} | ({"baseline": Path(args.baseline).resolve()} if args.baseline else {})
    for root in checkouts.values():
        subprocess.run([PY, "manage.py", "collectstatic", "--no-input", "-v", "0"], cwd=root, env=env, check=True)
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in checkouts}
    for round_ in range(args.rounds):
        names = list(checkouts) if round_ % 2 == 0 else list(reversed(checkouts))
        for name in names:
            first, second = measure(checkouts[name], env, args.port, args.path, args.boot_wait)
            results[name].append((first, second))
            print(f"round {round_ + 1} {name:8}  first {first:7.1f} ms  second {second:6.1f} ms", flush=True)
    for name, rows in results.items():
        print(
            f"{name:8} medians of {len(rows)}: first {statistics.median(r[0] for r in rows):.1f} ms, "
            f"second {statistics.median(r[1] for r in rows):.1f} ms"
        )


if __name__ == "__main__":
    main()
