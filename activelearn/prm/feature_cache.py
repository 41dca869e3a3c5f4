"""What a frozen backbone computes at the step separators, kept on disk and computed once.

A head-only PRM (every CPU recipe, ``head_training``) and an ORM on the same backbone read
the same backbone output: the last hidden state at each step separator. Training a head,
scoring a pool and evaluating on held-out labels each run that forward pass again, and it
is nearly all of their cost (on CHAMP with MiniLM about 0.5 CPU-s per solution; fitting the
head takes seconds). With a cache, every retraining of a head on the same backbone (each
generation, each split seed, each objective) pays the forward pass only for text it has
not seen.

What is cached: per encoded window (``StepEncoder``), the hidden state at every separator
token of the window, float32. A window's hidden states depend only on the backbone's
weights and the window's tokens (attention is causal and padding is masked), so the key is
a sha256 of the backbone's weights (``backbone_fingerprint``), the numeric mode and the
token ids. A fine-tuned backbone has other weights, so it can never read a frozen one's
entries.

A PRM with step features (``modeling.STEP_FEATURES``) reads each step's span, not just its
separator, so its entries are per step: the key adds the feature names, the separator's
position and the step's first token (``step_vectors``). A solution scored whole and the
same solution labeled at its final step (an ORM's training) share the final step's entry.

Storage is one SQLite file (WAL, so several scoring processes share it). Off unless a
directory is configured: ``configure(path)`` (Django does it from ``PRM_FEATURE_CACHE_DIR``)
or a ``FeatureCache`` passed explicitly. Results agree with an uncached forward pass to
float32 rounding (batch composition changes the padding, and so the summation order).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from activelearn.prm.batching import pad_batch
from activelearn.prm.modeling import ProcessRewardModel

DATABASE_FILE = "features.sqlite3"
# Windows per forward pass on a cache miss (inference only).
MISS_BATCH = 16

_configured: FeatureCache | None = None
_lock = threading.Lock()
# A model's fingerprint and the weight versions it was computed at (backbone_fingerprint).
_fingerprints: weakref.WeakKeyDictionary[ProcessRewardModel, tuple[tuple[int, ...], str]] = weakref.WeakKeyDictionary()


class FeatureCache:
    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / DATABASE_FILE
        self._local = threading.local()
        with self._connection() as db:
            db.execute("CREATE TABLE IF NOT EXISTS features (key BLOB PRIMARY KEY, positions BLOB, vectors BLOB)")
            db.execute("CREATE TABLE IF NOT EXISTS steps (key BLOB PRIMARY KEY, vector BLOB)")
        self.hits = 0
        self.misses = 0

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            # timeout: evaluations of two splits and several scoring processes write at once.
            connection = sqlite3.connect(self.path, timeout=60.0)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            self._local.connection = connection
        return connection

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, tuple[tuple[int, ...], torch.Tensor]]:
        found: dict[bytes, tuple[tuple[int, ...], torch.Tensor]] = {}
        db = self._connection()
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for key, positions, vectors in db.execute(
                f"SELECT key, positions, vectors FROM features WHERE key IN ({marks})", chunk
            ):
                where = tuple(int(p) for p in np.frombuffer(positions, dtype=np.int32))
                array = np.frombuffer(vectors, dtype=np.float32).reshape(len(where), -1)
                found[bytes(key)] = (where, torch.from_numpy(array.copy()))
        self.hits += len(found)
        self.misses += len(keys) - len(found)
        return found

    def put_many(self, items: Sequence[tuple[bytes, tuple[int, ...], torch.Tensor]]) -> None:
        rows = [
            (
                key,
                np.asarray(positions, dtype=np.int32).tobytes(),
                vectors.detach().float().cpu().numpy().astype(np.float32).tobytes(),
            )
            for key, positions, vectors in items
        ]
        with self._connection() as db:
            db.executemany("INSERT OR REPLACE INTO features (key, positions, vectors) VALUES (?, ?, ?)", rows)

    def get_steps(self, keys: Sequence[bytes]) -> dict[bytes, torch.Tensor]:
        found: dict[bytes, torch.Tensor] = {}
        db = self._connection()
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for key, vector in db.execute(f"SELECT key, vector FROM steps WHERE key IN ({marks})", chunk):
                found[bytes(key)] = torch.from_numpy(np.frombuffer(vector, dtype=np.float32).copy())
        self.hits += len(found)
        self.misses += len(keys) - len(found)
        return found

    def put_steps(self, items: Sequence[tuple[bytes, torch.Tensor]]) -> None:
        rows = [(key, vector.detach().float().cpu().numpy().astype(np.float32).tobytes()) for key, vector in items]
        with self._connection() as db:
            db.executemany("INSERT OR REPLACE INTO steps (key, vector) VALUES (?, ?)", rows)


def configure(directory: str | Path | None) -> FeatureCache | None:
    """The process-wide cache used when a caller passes none; None switches it off."""
    global _configured
    with _lock:
        _configured = None if directory is None else FeatureCache(directory)
        return _configured


def configured() -> FeatureCache | None:
    return _configured


def backbone_fingerprint(model: ProcessRewardModel) -> str:
    """sha256 of the backbone's class and weights, remembered until a weight changes.

    Tensor version counters move with every in-place update (an optimizer step, a
    ``copy_``), so a remembered fingerprint is reused only while the weights are the ones
    it hashed.
    """
    parameters = list(model.backbone.state_dict().items())
    versions = tuple(tensor._version for _, tensor in parameters)
    remembered = _fingerprints.get(model)
    if remembered is not None and remembered[0] == versions:
        return remembered[1]
    digest = hashlib.sha256(type(model.backbone).__name__.encode())
    for name, tensor in parameters:
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    fingerprint = digest.hexdigest()
    _fingerprints[model] = (versions, fingerprint)
    return fingerprint


def cacheable(model: ProcessRewardModel) -> bool:
    """Whether ``separator_hidden`` serves the model: no step features (else ``step_vectors``)."""
    return not model.prm_config.step_features


def _numeric_mode(device: torch.device) -> str:
    # Scoring on a GPU runs under bf16 autocast: its hidden states are not the CPU's.
    return "cuda-bf16" if device.type == "cuda" else f"{device.type}-fp32"


def window_key(fingerprint: str, mode: str, input_ids: Sequence[int]) -> bytes:
    digest = hashlib.sha256(f"{fingerprint}:{mode}:".encode())
    digest.update(np.asarray(input_ids, dtype=np.int64).tobytes())
    return digest.digest()


def separator_hidden(
    model: ProcessRewardModel,
    windows: Sequence[Sequence[int]],
    *,
    pad_id: int,
    separator_id: int,
    device: torch.device,
    cache: FeatureCache | None,
    on_batch: Callable[[], None] | None = None,
) -> list[dict[int, torch.Tensor]]:
    """For each window (token ids), the backbone's last hidden state at each of its separator
    tokens, by position; read from ``cache`` where it has them, computed (and stored) where not.

    Windows with the same tokens are computed once. Results are float32 on the CPU.
    """
    mode = _numeric_mode(device)
    fingerprint = backbone_fingerprint(model) if cache is not None else ""
    keys = [window_key(fingerprint, mode, ids) for ids in windows]
    known = cache.get_many(sorted(set(keys))) if cache is not None else {}
    missing: dict[bytes, Sequence[int]] = {}
    for key, ids in zip(keys, windows, strict=True):
        if key not in known:
            missing.setdefault(key, ids)
    todo = sorted(missing.items(), key=lambda item: len(item[1]))
    for chunk, _, hidden in _missed_batches(model, [ids for _, ids in todo], pad_id, device, on_batch):
        computed = []
        for row, index in enumerate(chunk):
            key, ids = todo[index]
            positions = tuple(i for i, token in enumerate(ids) if token == separator_id)
            vectors = hidden[row, list(positions)].float().cpu()
            known[key] = (positions, vectors)
            computed.append((key, positions, vectors))
        if cache is not None:
            cache.put_many(computed)
    out: list[dict[int, torch.Tensor]] = []
    for key in keys:
        positions, vectors = known[key]
        out.append({position: vectors[index] for index, position in enumerate(positions)})
    return out


def inference_autocast(device: torch.device) -> torch.autocast:
    """The numeric mode of every inference pass (scoring, features): bf16 on a GPU roughly
    doubles throughput; the float32 CPU path stays exact (``_numeric_mode`` keys the cache)."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def _missed_batches(
    model: ProcessRewardModel,
    windows: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device,
    on_batch: Callable[[], None] | None,
) -> Iterator[tuple[range, torch.Tensor, torch.Tensor]]:
    """The backbone's forward pass over ``windows`` (what the cache lacks, sorted by length so
    a batch pads little), ``MISS_BATCH`` at a time: the indices of each batch's windows, its
    input ids and last hidden states, on ``device``. Inference mode and eval mode hold while
    the caller reads a batch; ``on_batch`` is called after it."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(windows), MISS_BATCH):
                chunk = range(start, min(start + MISS_BATCH, len(windows)))
                input_ids, attention_mask = pad_batch([windows[i] for i in chunk], pad_id)
                input_ids = input_ids.to(device)
                with inference_autocast(device):
                    hidden = model.backbone(
                        input_ids=input_ids, attention_mask=attention_mask.to(device), use_cache=False
                    ).last_hidden_state
                yield chunk, input_ids, hidden
                if on_batch is not None:
                    on_batch()
    finally:
        model.train(was_training)


@dataclass(frozen=True)
class StepRequest:
    """The steps of one window whose head vectors are wanted: separator positions and the
    first token of each step (``EncodedWindow.step_starts``), in the same order."""

    input_ids: Sequence[int]
    positions: Sequence[int]
    starts: Sequence[int]


def step_key(prefix: bytes, position: int, start: int) -> bytes:
    return hashlib.sha256(prefix + np.asarray([position, start], dtype=np.int64).tobytes()).digest()


def step_vectors(
    model: ProcessRewardModel,
    requests: Sequence[StepRequest],
    *,
    pad_id: int,
    device: torch.device,
    cache: FeatureCache | None,
    on_batch: Callable[[], None] | None = None,
) -> list[torch.Tensor]:
    """For each request, what the head reads at its steps (``ProcessRewardModel.head_vectors``:
    the hidden state and the step features), [steps, head_inputs] float32 on the CPU; read
    from ``cache`` where it has every asked step of a window, computed (and stored) where not.
    """
    mode = _numeric_mode(device)
    fingerprint = backbone_fingerprint(model) if cache is not None else ""
    features = ",".join(model.prm_config.step_features)
    keys = [
        [
            step_key(window_key(fingerprint, f"{mode}:{features}", request.input_ids), position, start)
            for position, start in zip(request.positions, request.starts, strict=True)
        ]
        for request in requests
    ]
    known = cache.get_steps(sorted({k for ks in keys for k in ks})) if cache is not None else {}
    todo = sorted(
        (index for index, ks in enumerate(keys) if any(k not in known for k in ks)),
        key=lambda index: len(requests[index].input_ids),
    )
    asked = [requests[i] for i in todo]
    for chunk, input_ids, hidden in _missed_batches(model, [r.input_ids for r in asked], pad_id, device, on_batch):
        # Under the same autocast as the forward pass: the surprise's vocabulary matmul is the
        # other large product, and on a GPU it runs in bf16 like the backbone.
        with inference_autocast(device):
            rows = torch.tensor([row for row, i in enumerate(chunk) for _ in asked[i].positions])
            cols = torch.tensor([p for i in chunk for p in asked[i].positions])
            firsts = torch.tensor([s for i in chunk for s in asked[i].starts])
            vectors = (
                model.head_vectors(hidden, input_ids, rows.to(device), cols.to(device), firsts.to(device)).float().cpu()
            )
        computed = [(key, vectors[n]) for n, key in enumerate(k for i in chunk for k in keys[todo[i]])]
        known.update(computed)
        if cache is not None:
            cache.put_steps(computed)
    width = model.prm_config.head_inputs
    return [torch.stack([known[k] for k in ks]) if ks else torch.zeros(0, width) for ks in keys]
