"""Export files: written under a temporary name, renamed into place when complete, hashed as written.

``export_file_write`` is the one way an export reaches the disk: the records go
to a locked ``.partial`` file beside the target, which is synced and renamed
over the target when complete, and a manifest (record count, sha256 of the
file's bytes) is written beside it the same way. An interrupted export never
leaves a partial file under the target's name and never replaces the previous
file.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import orjson

# Lines per write call: one write per thousand records, not one per record.
LINES_PER_WRITE = 1000


@dataclass(frozen=True)
class ExportResult:
    path: Path | None
    records: int
    sha256: str
    bytes_written: int


class BytesSink(Protocol):
    def write(self, data: bytes, /) -> int: ...


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
    os.fchmod(fd, _file_mode())
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd, Path(name)


def _file_mode() -> int:
    """0o666 under the process umask, as ``open()`` would create it (mkstemp makes 0o600).

    Exports are read by the group that runs the downstream jobs; the deployment's umask,
    not this writer, decides who else may read them.
    """
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomically(path: Path, data: bytes) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.fchmod(fd, _file_mode())
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def lines_write(sink: BytesSink, lines: Iterable[bytes]) -> int:
    """Write each item as one line, ``LINES_PER_WRITE`` at a time; returns how many were written."""
    count = 0
    buffer: list[bytes] = []
    for line in lines:
        buffer.append(line)
        count += 1
        if len(buffer) >= LINES_PER_WRITE:
            sink.write(b"\n".join(buffer) + b"\n")
            buffer.clear()
    if buffer:
        sink.write(b"\n".join(buffer) + b"\n")
    return count


def export_file_write(
    output: str,
    *,
    file_format: str,
    details: Mapping[str, Any],
    write: Callable[[HashingWriter, Path], int],
) -> ExportResult:
    """Write an export to ``output`` atomically, with ``<output>.manifest.json`` beside it.

    ``write`` gets the hashing sink of the partial file and the partial file's
    path; it writes the records through the sink (or by path, for a writer that
    only takes one: pyarrow) and returns how many it wrote. The manifest holds
    the format, file name, record count, sha256 and size, then ``details``.
    """
    target = Path(output).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = open_partial(target)
    try:
        with os.fdopen(fd, "wb") as raw:
            sink = HashingWriter(raw)
            count = write(sink, tmp)
            raw.flush()
            os.fsync(raw.fileno())
        # Nothing went through the sink: the writer wrote by path (or wrote
        # nothing, and the empty file hashes the same either way).
        size, digest = (sink.size, sink.sha.hexdigest()) if sink.size else _file_sha256(tmp)
        manifest = {"format": file_format, "file": target.name, "records": count, "sha256": digest, "bytes": size}
        manifest.update(details)
        os.replace(tmp, target)
        write_atomically(
            target.with_name(target.name + ".manifest.json"), orjson.dumps(manifest, option=orjson.OPT_INDENT_2)
        )
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ExportResult(path=target, records=count, sha256=digest, bytes_written=size)


def _file_sha256(path: Path) -> tuple[int, str]:
    sha = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            sha.update(chunk)
            size += len(chunk)
    return size, sha.hexdigest()
