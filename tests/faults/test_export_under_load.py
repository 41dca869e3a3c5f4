"""Exports taken while labelers write, and an export SIGKILLed mid-write."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import ROOT, child_env, connect, scenario, wait_for


def export(database_url: str, target: Path, **popen: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "export_prm800k", "-o", str(target), "--no-progress"],
        cwd=ROOT, env=child_env(DATABASE_URL=database_url), text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, **popen,
    )  # fmt: skip


def verified(target: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads(target.with_name(target.name + ".manifest.json").read_text())
    data = target.read_bytes()
    assert manifest["sha256"] == hashlib.sha256(data).hexdigest()
    assert manifest["records"] == data.count(b"\n")
    return manifest


def writing_to(pid: int, folder: Path) -> bool:
    """The process has a file open in ``folder`` (named or O_TMPFILE) with bytes in it."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        for fd in fds.iterdir():
            link = os.readlink(fd)
            if link.startswith(str(folder)) and os.stat(fd).st_size > 0:
                return True
    except OSError:
        return False
    return False


def test_an_export_under_load_is_one_snapshot_and_a_killed_export_leaves_the_previous_file(fault_db, tmp_path):
    seed = scenario(fault_db, "export_seed", tasks=200, labelers=100, writers=4, writer_tasks=400)
    log, go = tmp_path / "submits.log", tmp_path / "go"
    writers = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.scenario", "export_writers",
         json.dumps({"seconds": 25, "log": str(log), "go": str(go)})],
        cwd=ROOT, env=child_env(DATABASE_URL=fault_db), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    go.touch()
    wait_for(lambda: log.exists() and len(log.read_text().split()) >= 3, timeout=60, what="submissions")
    out = tmp_path / "out"
    target = out / "export.jsonl"
    first = export(fault_db, target)
    assert first.wait(120) == 0, first.stdout.read() if first.stdout else ""
    first_manifest = verified(target)
    written, _ = writers.communicate(timeout=120)
    assert writers.returncode == 0, written
    order = [int(line) for line in log.read_text().split()]

    # One snapshot: the history plus exactly the first k submissions in commit order.
    k = int(first_manifest["records"]) - seed["submitted"]
    assert 3 <= k < len(order), (k, len(order))
    records = [json.loads(line) for line in target.read_text().splitlines()]
    with connect(fault_db) as db:
        rows = db.execute(
            """SELECT a.id, l.uuid::text, a.submitted_at, a.label_steps_json FROM labeling_assignment a
               JOIN labeling_labeler l ON l.id = a.labeler_id WHERE a.id = ANY(%s)""",
            [order],
        ).fetchall()
    by_key = {(uuid, at.replace(tzinfo=None).isoformat()): (pk, label) for pk, uuid, at, label in rows}
    exported = [by_key.get((r["labeler"], r["timestamp"])) for r in records[seed["submitted"] :]]
    assert all(e is not None for e in exported)
    assert {e[0] for e in exported if e} == set(order[:k])
    # Content: each exported label is the stored (frozen) one.
    assert all(r["label"]["steps"] == json.loads(e[1]) for r, e in zip(records[seed["submitted"] :], exported,
                                                                          strict=True) if e)  # fmt: skip

    # A second export, killed mid-write: the previous file and its manifest stay as they were.
    before = target.read_bytes()
    second = export(fault_db, target, start_new_session=True)
    wait_for(lambda: writing_to(second.pid, out) or second.poll() is not None, timeout=60, what="writing",
             poll=0.005)  # fmt: skip
    assert second.poll() is None, "the export finished before it could be killed"
    os.killpg(second.pid, signal.SIGKILL)
    second.wait()
    assert target.read_bytes() == before
    assert verified(target) == first_manifest
    # The killed writer could not remove its own .partial file; the next export does
    # (its lock died with it), and a complete export leaves nothing else behind.
    left = [p.name for p in out.iterdir() if p.name.endswith(".partial")]
    assert len(left) <= 1, left
    third = export(fault_db, target)
    assert third.wait(120) == 0, third.stdout.read() if third.stdout else ""
    assert verified(target)["records"] == first_manifest["records"] + len(order) - k
    assert sorted(p.name for p in out.iterdir()) == [
        "export.jsonl",
        "export.jsonl.manifest.json",
        "export.jsonl.selection.jsonl",
    ]
    # The selection reasons name every record of the complete export, in order.
    reasons = (out / "export.jsonl.selection.jsonl").read_text().splitlines()
    assert [json.loads(line)["record"] for line in reasons] == list(range(1, len(reasons) + 1))
    assert len(reasons) == verified(target)["records"]
