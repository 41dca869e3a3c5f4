"""Write a directory so that readers see either the old complete one or the new complete one."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_directory(target: Path) -> Iterator[Path]:
    """Yield a scratch directory that replaces ``target`` only if the block succeeds.

    The scratch directory is a sibling so the final ``os.replace`` is a same-filesystem
    rename; a process killed mid-write leaves only a ``.tmp-*`` directory behind, which
    ``sweep_scratch`` removes and checkpoint discovery ignores.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.parent / f".tmp-{target.name}-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    try:
        yield scratch
        _fsync_tree(scratch)
        if target.exists():
            # os.replace cannot overwrite a non-empty directory, so move the old one
            # aside first; the window without `target` is a rename, not a rewrite.
            retired = target.parent / f".tmp-old-{target.name}-{uuid.uuid4().hex[:8]}"
            os.replace(target, retired)
            os.replace(scratch, target)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(scratch, target)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def sweep_scratch(parent: Path) -> None:
    """Remove scratch directories left by killed writers."""
    if not parent.is_dir():
        return
    for child in parent.iterdir():
        if child.is_dir() and child.name.startswith(".tmp-"):
            shutil.rmtree(child, ignore_errors=True)


def _fsync_tree(root: Path) -> None:
    # Without this a power loss right after the rename could expose empty files.
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
