"""The search benchmark runs at a tiny size: both statements find the same task, the product's reads fewer buffers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.postgres
@pytest.mark.slow
def test_the_search_benchmark_compares_the_two_statements_on_the_same_leased_front(scratch_database_url):
    url = scratch_database_url
    built = subprocess.run(
        [sys.executable, "benchmarks/labeling_campaign.py", "--database-url", url, "--solutions", "80",
         "--steps", "2", "--tasks", "4", "--labelers", "2", "--modes", ""],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    run = subprocess.run(
        [sys.executable, "benchmarks/search_leases.py", "--database-url", url, "--leases", "0,30", "--rounds", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    # It exits non-zero where the two statements find different tasks.
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = {int(cells[0]): [float(c) for c in cells[1:]] for line in run.stdout.splitlines()[1:]
            if len(cells := line.split(" | ")) == 6}  # fmt: skip
    assert sorted(rows) == [0, 30]
    product_buffers, previous_buffers = rows[30][3], rows[30][4]
    assert product_buffers < previous_buffers / 2, run.stdout  # 30 leased tasks passed over without a probe each
