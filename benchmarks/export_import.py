"""Import and export throughput at a given scale, against a bare orjson dump.

Synthesises a PRM800K-shaped dataset (phase-2 records, about 11 labeled steps
per solution on average, alternatives at some error steps), then in the same
run times

* ``manage.py import_prm800k`` (a child process, so its peak RSS is its own),
* ``manage.py export_prm800k`` (likewise),
* the baseline: ``orjson.dumps`` of the same records from memory to a file.

It reports records/s, the export/baseline ratio and each command's peak RSS.
``--solutions 100000`` reaches release scale (about 1.1M step labels).

    python benchmarks/export_import.py --solutions 10000 --solutions 100000

The database named by ``--database-url`` is dropped and recreated.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3


def synthesise(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    problems = [
        {
            "problem": f"Problem {i}: compute $\\frac{{{i}}}{{{i + 1}}} + {i}^2$ and simplify.",
            "ground_truth_solution": f"We have $\\frac{{{i}}}{{{i + 1}}} + {i * i} = \\boxed{{{i}}}$.",
            "ground_truth_answer": str(i),
        }
        for i in range(max(1, n // 8))
    ]
    labelers = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(60)]
    records = []
    for k in range(n):
        question: dict[str, Any] = dict(rng.choice(problems))
        length = rng.randint(10, 24)
        steps = [
            f"Step {j} of solution {k}: so $x_{{{j}}} = {rng.randint(0, 999)}\\cdot 2^{{{j}}}$." for j in range(length)
        ]
        question |= {
            "pre_generated_steps": steps,
            "pre_generated_answer": str(rng.randint(0, 99)),
            "pre_generated_verifier_score": rng.random(),
        }
        error_at = rng.randint(0, length - 1) if rng.random() < 0.85 else None
        labeled = length if error_at is None else error_at + 1
        label_steps = []
        for j in range(labeled):
            completions = [
                {"text": steps[j], "rating": 1 if j != error_at else -1, "flagged": rng.choice([None, False])}
            ]
            if j == error_at and rng.random() < 0.3:
                completions += [
                    {"text": f"Alternative {a} for step {j}.", "rating": rng.choice([-1, 0, 1]), "flagged": False}
                    for a in range(rng.randint(1, 4))
                ]
            label_steps.append(
                {
                    "completions": completions,
                    "human_completion": None,
                    "chosen_completion": None if j == error_at else 0,
                }
            )
        records.append(
            {
                "labeler": rng.choice(labelers),
                "timestamp": f"2023-01-{1 + k % 28:02d}T{k % 24:02d}:{k % 60:02d}:{(k // 60) % 60:02d}"
                f".{k % 999999 + 1:06d}",
                "generation": rng.randint(0, 9),
                "is_quality_control_question": rng.random() < 0.02,
                "is_initial_screening_question": False,
                "question": question,
                "label": {
                    "steps": label_steps,
                    "total_time": rng.randint(10_000, 600_000),
                    "finish_reason": "found_error" if error_at is not None else "solution",
                },
            }
        )
    return records


def run_child(args: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process.

    RSS is sampled from /proc rather than taken from rusage: Linux carries a
    process's max RSS across fork+exec, so a child of this (large) process
    would report the parent's footprint.
    """
    import psutil

    start = time.perf_counter()
    process = subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watched = psutil.Process(process.pid)
    peak = 0
    while process.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    elapsed = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{process.stderr.read().decode() if process.stderr else ''}")
    return elapsed, peak


def reset_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def measure(solutions: int, url: str, seed: int, workdir: Path) -> dict[str, Any]:
    env = os.environ | {
        "DATABASE_URL": url,
        "SECRET_KEY": "benchmark-only",
        "DJANGO_SETTINGS_MODULE": "annotate.settings",
    }
    if url.startswith("postgres"):
        reset_database(url)
    else:
        Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True)

    records = synthesise(solutions, seed)
    source = workdir / f"synthetic-{solutions}.jsonl"
    source.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    labels = sum(len(s["completions"]) for r in records for s in r["label"]["steps"])

    import_s, import_rss = run_child([sys.executable, "manage.py", "import_prm800k", str(source), "--no-progress"], env)
    out = workdir / f"export-{solutions}.jsonl"
    export_cmd = [sys.executable, "manage.py", "export_prm800k", "--output", str(out), "--no-progress"]
    # Process start-up (Python, Django, apps) measured as an export that selects nothing.
    empty_cmd = [*export_cmd[:4], str(workdir / "empty.jsonl"), "--generation", "999999", "--no-progress"]
    startup_s = statistics.median(run_child(empty_cmd, env)[0] for _ in range(REPEATS))
    export_runs = [run_child(export_cmd, env) for _ in range(REPEATS)]
    export_s = statistics.median(t for t, _ in export_runs)
    export_rss = max(rss for _, rss in export_runs)

    # Baseline: the same records, already in memory, dumped to a file.
    baseline = workdir / f"baseline-{solutions}.jsonl"
    baseline_runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        with baseline.open("wb") as handle:
            for record in records:
                handle.write(orjson.dumps(record) + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        baseline_runs.append(time.perf_counter() - start)
    baseline_s = statistics.median(baseline_runs)

    exported = out.read_bytes().count(b"\n")

    # Same records, compared as values: the export writes stored JSON as the
    # database prints it, so whitespace may differ from orjson's.
    def canonical(path: Path) -> list[bytes]:
        return sorted(orjson.dumps(orjson.loads(line), option=orjson.OPT_SORT_KEYS) for line in path.open("rb"))

    same = canonical(out) == canonical(baseline)
    return {
        "solutions": solutions,
        "step_labels": labels,
        "import_s": round(import_s, 2),
        "import_records_per_s": round(solutions / import_s),
        "import_peak_rss_mib": round(import_rss / 2**20),
        "export_s": round(export_s, 2),
        "export_records_per_s": round(exported / export_s),
        "export_peak_rss_mib": round(export_rss / 2**20),
        "startup_s": round(startup_s, 2),
        "export_net_records_per_s": round(exported / (export_s - startup_s)),
        "export_net_vs_baseline": round((exported / (export_s - startup_s)) / (solutions / baseline_s), 3),
        "baseline_s": round(baseline_s, 3),
        "baseline_records_per_s": round(solutions / baseline_s),
        "export_vs_baseline": round((exported / export_s) / (solutions / baseline_s), 3),
        "export_equals_input": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--solutions", type=int, action="append", help="scale(s) to run (default: 2000)")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/annotate_bench_io")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.solutions or [2000]:
            result = measure(n, args.database_url, args.seed, Path(tmp))
            results.append(result)
            print(json.dumps(result), flush=True)
    columns = [
        ("solutions", "solutions"),
        ("step labels", "step_labels"),
        ("import rec/s", "import_records_per_s"),
        ("import peak RSS MiB", "import_peak_rss_mib"),
        ("export rec/s", "export_records_per_s"),
        ("export peak RSS MiB", "export_peak_rss_mib"),
        ("baseline rec/s", "baseline_records_per_s"),
        ("export/baseline", "export_vs_baseline"),
        ("export/baseline, start-up excluded", "export_net_vs_baseline"),
    ]
    print("\n| " + " | ".join(title for title, _ in columns) + " |")
    print("|" + "---|" * len(columns))
    for r in results:
        print("| " + " | ".join(f"{r[key]:,}" for _, key in columns) + " |")


if __name__ == "__main__":
    main()
