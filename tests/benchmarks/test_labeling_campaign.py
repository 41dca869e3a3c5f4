"""The campaign benchmark runs end to end at a tiny size: labelers finish every task, windows are reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _campaign(url: str, tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Runs the benchmark on ``url`` (a scratch database) and returns the run and its JSON."""
    out = tmp_path / "campaign.json"
    command = [sys.executable, "benchmarks/labeling_campaign.py", "--database-url", url, "--steps", "2",
               "--workers", "1", "--floor-interval", "0.02", *options, "--json", str(out)]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run, json.loads(out.read_text())


@pytest.mark.postgres
@pytest.mark.slow
def test_a_tiny_campaign_finishes_its_tasks_and_reports_each_window(tmp_path, scratch_database_url):
    # The floor presses once before the labelers start, then every 30 s: each window is over long before the
    # second press, and the first still has its baseline (the labelers once raced the floor's start-up).
    run, modes_run = _campaign(
        scratch_database_url, tmp_path, "--tasks", "6", "--window", "3", "--labelers", "2", "--think", "0,0",
        "--solutions", "40", "--modes", "off,shipped", "--explain", "--port", "8791", "--floor-interval", "30",
    )  # fmt: skip
    modes = {m["mode"]: m for m in modes_run}
    # shipped needs the cluster's autovacuum; where it is off the run says so instead.
    assert "off" in modes and ("shipped" in modes or "shipped: skipped" in run.stdout)
    for mode in modes.values():
        assert [w["tasks"] for w in mode["windows"]] == [3, 6]
        assert mode["errors"] == 0 and mode["stored_ok"]
        first = mode["windows"][0]
        assert first["submit+next"]["count"] >= 1 and first["submit+next"]["cpu_ms"] > 0
        assert first["floor press"]["count"] == 1 and first["floor_ms"] > 0
        assert any("task_queue_idx" in line for line in first["plan"])
    assert "submit + next CPU, last window / first" in run.stdout


@pytest.mark.postgres
@pytest.mark.slow
def test_measured_windows_at_real_pace_run_at_the_start_and_after_every_boundary(tmp_path, scratch_database_url):
    run, (mode,) = _campaign(
        scratch_database_url, tmp_path, "--tasks", "12", "--window", "6", "--labelers", "2", "--think", "0.3,0.5",
        "--solutions", "60",
        "--modes", "off", "--port", "8793", "--measure-seconds", "3", "--measure-labelers", "3",
        "--measure-think", "0.5,1",
        # Shorter than a pause between windows: a labeler coming back must not reuse a closed connection.
        "--keep-alive", "1",
    )  # fmt: skip
    measured = mode["measured"]
    # One at the fresh queue, then one after each boundary the fast labelers reached.
    assert measured[0]["tasks"] == 0 and len(measured) >= 2
    assert [m["tasks"] for m in measured] == sorted(m["tasks"] for m in measured)
    for window in measured:
        assert window["rate"]["count"] >= 3 and window["rate"]["p95"] > 0
        assert window["errors"] == 0
        # The same-run baseline: the floor's presses during the window, apart from the product's.
        assert window["floor press"]["count"] >= 10 and window["floor press"]["p95"] > 0
    assert sum(m["submit+next"]["count"] for m in measured) >= 3
    # The measured labelers' ratings are in the stored == acknowledged check, and the campaign still finishes.
    assert mode["errors"] == 0 and mode["stored_ok"]
    assert mode["windows"][-1]["tasks"] == 12
    assert "measured at real pace: 3 labelers" in run.stdout and "worst checkpoint" in run.stdout


def test_a_malformed_think_range_is_refused_with_the_flag_named():
    run = subprocess.run([sys.executable, "benchmarks/labeling_campaign.py", "--measure-think", "5,1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2
    assert "--measure-think '5,1': expected 0 <= LOW <= HIGH" in run.stderr
