"""Sampling from a real OpenAI-compatible server process: llama.cpp's (``python -m
llama_cpp.server``, requirements-test-server.txt) serving the SmolLM2 GGUF on CPU.

The server answers one choice per request whatever ``n`` asks, as llama.cpp's does, so
the sampler's asking again for the rest runs here too.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.db.models import Count

from activelearn.generations import sampling
from activelearn.generations.pipeline import generation_retry, generation_start
from activelearn.models import GenerationRun, SampleChunk, SolutionSample
from activelearn.stepgen.builtin import smollm2_gguf_file
from labeling.models import GenerationStatus, Problem, Solution, Task, text_sha256
from tests.activelearn.pipeline_factories import config, drive, labels

S = GenerationStatus
pytestmark = [pytest.mark.slow, pytest.mark.faults]
N = 2


class LlamaServer:
    """One llama.cpp server process on a fixed free port, started and killed at will."""

    def __init__(self, log: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf_file()),
                 "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(self.port),
                 "--n_ctx", "512", "--n_threads", "1", "--verbose", "false"],
                stdout=sink, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"llama.cpp server did not start:\n{self.log.read_text(errors='replace')}")
            time.sleep(0.2)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def llama_server(tmp_path) -> Iterator[LlamaServer]:
    server = LlamaServer(tmp_path / "llama-server.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture
def private_queue(settings, tmp_path) -> Iterator[str]:
    """The steps this test drives in-process also send their follow-ups after commit:
    to a queue nobody consumes, emptied at the end."""
    name = f"test-sampling-{uuid.uuid4().hex[:10]}"
    settings.CHECKPOINT_DIR = tmp_path / "checkpoints"
    settings.PIPELINE_GPU_QUEUE = settings.PIPELINE_CPU_QUEUE = name
    yield name
    from annotate.celery import app

    with app.connection_for_write() as conn, contextlib.suppress(Exception):
        conn.default_channel.queue_purge(name)


def kill_after_first_problem(server: LlamaServer, stop: threading.Event) -> None:
    """Kill the server once one problem's draws are stored, while the others are asked for."""
    try:
        while not stop.is_set():
            if SolutionSample.objects.count() >= N:
                server.kill()
                return
            time.sleep(0.05)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_server_killed_mid_sampling_loses_nothing_and_the_retry_finishes_without_duplicates(
    llama_server, private_queue, settings
):
    settings.SAMPLING_BACKEND = "openai"
    settings.SAMPLING_OPENAI_BASE_URL = llama_server.url
    settings.SAMPLING_OPENAI_MODEL = "smollm2"
    settings.SAMPLING_MAX_TOKENS = 24
    settings.SAMPLING_SEED = 3
    settings.SAMPLING_RETRIES = 1
    settings.SAMPLING_BACKOFF_S = 0.1
    settings.SAMPLING_TIMEOUT_S = 60.0
    settings.SAMPLING_CONCURRENCY = 1
    settings.PIPELINE_SAMPLE_CHUNK_PROBLEMS = 3
    labels()
    for i in range(3):
        text = f"What is {i} + 2? Answer with the number."
        Problem.objects.create(
            unique_id=f"server/{i}.json",
            problem=text,
            problem_sha256=text_sha256(text),
            answer=str(i + 2),
            split="test",
        )
    generation = generation_start(config=config(sample_n=N, split="test", k=3))
    sampling.sampling_dispatch(generation_id=generation.pk)
    [chunk] = SampleChunk.objects.filter(run__generation=generation)

    stop = threading.Event()
    killer = threading.Thread(target=kill_after_first_problem, args=(llama_server, stop))
    killer.start()
    try:
        with pytest.raises(sampling.SamplingError):
            sampling.sample_chunk_run(chunk_id=chunk.pk)
    finally:
        stop.set()
        killer.join()

    generation.refresh_from_db()
    assert generation.status == S.FAILED
    before = set(SolutionSample.objects.values_list("pk", "problem__unique_id", "index", "solution_id", "text"))
    sampled_problems = {uid for _, uid, _, _, _ in before}
    assert len(before) == N * len(sampled_problems) and 1 <= len(sampled_problems) < 3, (
        generation.error,
        llama_server.log.read_text(errors="replace")[-3000:],
    )
    missing = sorted({"server/0.json", "server/1.json", "server/2.json"} - sampled_problems)
    endpoint = f"{llama_server.url}/v1/completions"
    assert generation.error.startswith(f"sampling problem '{missing[0]}' from {endpoint}: POST {endpoint} failed")

    llama_server.start()
    generation = drive(generation_retry(generation_id=generation.pk))

    assert generation.status == S.OPEN, generation.error
    run = GenerationRun.objects.get(generation=generation)
    draws = SolutionSample.objects.filter(run=run)
    assert draws.count() == 3 * N
    assert (run.sampled, run.sample_total) == (3 * N, 3 * N)
    # The draws stored before the kill are kept as they were; each problem has N, once.
    assert before <= set(draws.values_list("pk", "problem__unique_id", "index", "solution_id", "text"))
    assert sorted(draws.values_list("problem__unique_id", "index")) == [
        (f"server/{p}.json", i) for p in range(3) for i in range(N)
    ]
    assert (
        not Solution.objects.values("problem", "content_sha256", "source_model")
        .annotate(copies=Count("id"))
        .filter(copies__gt=1)
    )
    # Provenance from the server: its request ids, the seeds sent, what it was asked.
    assert all(d.request_id.startswith("cmpl-") and d.model == "smollm2" for d in draws)
    assert all(d.seed is not None and d.params["max_tokens"] == 24 for d in draws)
    # Every sampled solution was graded, and the generation selected from them alone.
    pool = Solution.objects.filter(samples__run=run).distinct()
    assert pool.exists() and not pool.filter(grading_note="").exists()
    assert Task.objects.filter(generation=generation).exists()
    assert not Task.objects.filter(generation=generation).exclude(solution__in=pool).exists()
