"""Export files: written under a temporary name, renamed into place when complete, hashed as written.

An interrupted export never leaves a partial file under the target's name and
never replaces the previous file.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class ExportResult:
    path: Path | None
    records: int
    sha256: str
    bytes_written: int


class HashingWriter:
    """Counts and hashes what reaches the file, compressed or not."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def open_partial(target: Path) -> tuple[int, Path]:
    """A hidden ``.partial`` file beside ``target``, locked for as long as this export runs.

    A SIGKILLed (or OOM-killed) export cannot remove its partial file, but the kernel
    drops its lock: the next export of the same target removes every partial file whose
    lock it can take (whose writer is dead), and leaves those of a running export alone.
    """
    for stale in target.parent.glob(f".{glob.escape(target.name)}.*.partial"):
        with contextlib.suppress(OSError), stale.open("rb") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            stale.unlink()
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd, Path(name)


def write_atomically(path: Path, data: bytes) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
