"""The sampling step, run in this process against an OpenAI-compatible test server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from activelearn.generations import sampling
from activelearn.generations.config import GenerationConfigError
from activelearn.generations.pipeline import generation_retry, generation_start
from activelearn.generations.reconciler import pipeline_reconcile
from activelearn.generations.sampler import solution_sampler
from activelearn.generations.sampling import draw_steps, problem_seed
from activelearn.models import GenerationRun, SampleChunk, SampleChunkStatus, SolutionSample
from labeling.models import Generation, GenerationStatus, Problem, Solution, Task, content_sha256, text_sha256
from tests.activelearn.pipeline_factories import config, drive, labels, queued
from tests.activelearn.stepgen.completions_server import Fail, ServerState, completions_server

S = GenerationStatus
pytestmark = pytest.mark.django_db


def problems(count: int = 3) -> list[Problem]:
    made = []
    for i in range(count):
        text = f"Sampling problem {i}: what is 40 + 2?"
        made.append(
            Problem.objects.create(
                unique_id=f"sample/{i}.json", problem=text, problem_sha256=text_sha256(text), answer="42", split="test"
            )
        )
    return made


def documents(made: list[Problem]) -> list[str]:
    """Two distinct solutions per problem, one right and one wrong, and a tail past the answer."""
    docs = []
    for problem in made:
        docs.append(f"{problem.problem}\n\nWe add 40 and 2.\nSo it is 42.\n\n# Answer\n\n42\n\nNext problem: 1+1?")
        docs.append(f"{problem.problem}\n\nWe guess.\n\n# Answer\n\n41")
    return docs


@pytest.fixture
def sampling_settings(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path / "checkpoints"
    settings.PIPELINE_GPU_QUEUE = "test-gpu"
    settings.PIPELINE_CPU_QUEUE = "test-cpu"
    settings.PIPELINE_SAMPLE_CHUNK_PROBLEMS = 2
    settings.SAMPLING_BACKEND = "openai"
    settings.SAMPLING_OPENAI_MODEL = "math-gen"
    settings.SAMPLING_MAX_TOKENS = 64
    settings.SAMPLING_SEED = 5
    settings.SAMPLING_RETRIES = 1
    settings.SAMPLING_BACKOFF_S = 0.0
    settings.SAMPLING_TIMEOUT_S = 5.0
    return settings


@pytest.fixture
def server(sampling_settings) -> Iterator[ServerState]:
    made = problems()
    state = ServerState(documents(made))
    with completions_server(state) as url:
        sampling_settings.SAMPLING_OPENAI_BASE_URL = url
        yield state


def sampled_config(**overrides: Any) -> dict[str, Any]:
    return config(sample_n=3, split="test", k=4, **overrides)


def test_a_draw_is_split_into_newline_steps_that_end_at_its_answer():
    assert draw_steps("We add.\n\nSo 42.\n\n# Answer\n\n42\n\nNext problem: 1+1?\nIt is 2.") == [
        "We add.", "So 42.", "# Answer\n\n42",
    ]  # fmt: skip
    assert draw_steps("We add.\nand never finish") == ["We add.", "and never finish"]
    assert draw_steps("   \n") == []


def test_a_problem_seed_is_stable_and_differs_by_generation_and_problem():
    seed = problem_seed(base=5, generation_number=0, problem_unique_id="a")
    assert seed == problem_seed(base=5, generation_number=0, problem_unique_id="a")
    assert seed != problem_seed(base=5, generation_number=1, problem_unique_id="a")
    assert seed != problem_seed(base=5, generation_number=0, problem_unique_id="b")
    assert seed is not None and 0 <= seed < 2**30
    assert problem_seed(base=None, generation_number=0, problem_unique_id="a") is None


def test_a_generation_with_sample_n_starts_by_sampling(server, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        generation = generation_start(config=sampled_config())

    assert generation.status == S.SAMPLING
    assert generation.run.step == S.SAMPLING and generation.run.sampling_started_at is not None
    assert queued(callbacks) == [("generation_sample_task", (generation.pk,), "test-cpu")]


def test_it_samples_n_per_problem_stores_provenance_dedupes_grades_and_selects_from_the_draws(server, settings):
    labels()
    imported_text = "Sampling problem 0: what is 40 + 2?"
    imported = Solution.objects.create(
        problem=Problem.objects.get(problem=imported_text),
        steps=["An imported solution.", "# Answer\n\n42"],
        content_sha256=content_sha256(["An imported solution.", "# Answer\n\n42"], "42"),
        final_answer="42",
    )

    generation = drive(generation_start(config=sampled_config()))

    assert generation.status == S.OPEN, generation.error
    run = GenerationRun.objects.get(generation=generation)
    assert (run.sampled, run.sample_total) == (9, 9)
    assert run.sampling_finished_at is not None
    draws = SolutionSample.objects.filter(run=run)
    assert draws.count() == 9
    assert SampleChunk.objects.filter(run=run, status=SampleChunkStatus.DONE).count() == 2
    first = draws.order_by("problem_id", "index").first()
    assert first is not None
    assert (first.generator, first.model, first.endpoint) == (
        "openai",
        "math-gen",
        f"{settings.SAMPLING_OPENAI_BASE_URL}/v1/completions",
    )
    assert first.request_id == "cmpl-test" and first.finish_reason == "stop"
    assert first.seed == problem_seed(base=5, generation_number=generation.number, problem_unique_id="sample/0.json")
    assert first.params == {
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens": 64,
        "prompt_template": "{problem}\n\n{steps}",
    }
    # Three draws per problem from two distinct texts: two solutions each, graded.
    sampled = Solution.objects.filter(samples__run=run).distinct()
    assert sampled.count() == 6
    assert sorted(sampled.values_list("is_correct", flat=True), key=str) == [False] * 3 + [True] * 3
    right = sampled.get(problem__unique_id="sample/0.json", is_correct=True)
    assert right.steps == ["We add 40 and 2.", "So it is 42.", "# Answer\n\n42"]
    assert (right.final_answer, right.source_model) == ("42", "math-gen")
    assert right.generator == f"sampling, generation {generation.number}"
    # The pool is the draws: the imported solution is neither scored nor selected.
    assert run.score_total == 6
    assert set(Task.objects.filter(generation=generation).values_list("solution_id", flat=True)) <= set(
        sampled.values_list("pk", flat=True)
    )
    assert not Task.objects.filter(solution=imported).exists()
    # One request per problem (the server answers n=3 at once), nothing asked twice.
    assert len(server.requests) == 3


def test_a_dead_server_fails_the_step_naming_the_server_and_the_problem_and_a_retry_resumes(server, settings):
    labels()
    generation = generation_start(config=sampled_config())
    sampling.sampling_dispatch(generation_id=generation.pk)
    first, second = SampleChunk.objects.filter(run__generation=generation).order_by("ordinal")
    sampling.sample_chunk_run(chunk_id=first.pk)
    done = set(SolutionSample.objects.values_list("pk", "solution_id"))
    assert len(done) == 6
    live_url = settings.SAMPLING_OPENAI_BASE_URL
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    settings.SAMPLING_OPENAI_BASE_URL = dead

    with pytest.raises(sampling.SamplingError):
        sampling.sample_chunk_run(chunk_id=second.pk)

    generation.refresh_from_db()
    assert generation.status == S.FAILED
    assert generation.error.startswith(
        f"sampling problem 'sample/2.json' from {dead}/v1/completions: POST {dead}/v1/completions failed after 2 "
        "attempt(s); last: connection failed: ConnectionRefusedError"
    )
    second.refresh_from_db()
    assert second.status == SampleChunkStatus.FAILED

    settings.SAMPLING_OPENAI_BASE_URL = live_url
    generation = drive(generation_retry(generation_id=generation.pk))

    assert generation.status == S.OPEN, generation.error
    # What was stored before the failure is kept as it was; each problem has its N draws once.
    assert done <= set(SolutionSample.objects.values_list("pk", "solution_id"))
    assert SolutionSample.objects.count() == 9
    assert len(server.requests) == 3


def test_a_misconfigured_server_fails_at_once_with_its_answer(server):
    server.script = [Fail(404, "The model `math-gen` does not exist.")]
    generation = generation_start(config=sampled_config())

    with pytest.raises(sampling.SamplingError):
        drive(generation)

    generation.refresh_from_db()
    assert generation.status == S.FAILED
    assert "returned HTTP 404 (not retried)" in generation.error
    assert "does not exist" in generation.error and "sampling problem 'sample/" in generation.error


def test_a_retried_chunk_samples_only_the_problems_without_draws(server):
    generation = generation_start(config=sampled_config())
    sampling.sampling_dispatch(generation_id=generation.pk)
    chunk = SampleChunk.objects.filter(run__generation=generation).order_by("ordinal").first()
    assert chunk is not None
    sampling.sample_chunk_run(chunk_id=chunk.pk)
    # As if the worker had died after its writes and before marking the chunk done.
    SampleChunk.objects.filter(pk=chunk.pk).update(
        status=SampleChunkStatus.RUNNING, heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    requests = len(server.requests)

    assert sampling.sample_chunk_run(chunk_id=chunk.pk) == 0

    assert len(server.requests) == requests
    chunk.refresh_from_db()
    assert (chunk.status, chunk.attempts) == (SampleChunkStatus.DONE, 2)
    assert SolutionSample.objects.count() == 6


def test_a_worker_that_lost_its_claim_writes_nothing(server):
    generation = generation_start(config=sampled_config())
    sampling.sampling_dispatch(generation_id=generation.pk)
    chunk = SampleChunk.objects.filter(run__generation=generation).order_by("ordinal").first()
    assert chunk is not None
    token = sampling.sample_chunk_claim(chunk_id=chunk.pk)
    assert token is not None
    SampleChunk.objects.filter(pk=chunk.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert sampling.sample_chunk_claim(chunk_id=chunk.pk) not in (None, token)
    sampler = solution_sampler()
    draws = sampler.sample_solutions(problem=Problem.objects.get(pk=chunk.problem_ids[0]).problem, n=3, seed=1)

    written = sampling.problem_draws_store(
        chunk_id=chunk.pk, token=token, run_id=chunk.run_id, problem_id=chunk.problem_ids[0],
        draws=draws, sampler=sampler, generator="test",
    )  # fmt: skip

    assert written is None
    assert not SolutionSample.objects.exists() and not Solution.objects.exists()


def test_a_draw_slot_is_filled_once(server):
    generation = generation_start(config=sampled_config())
    sampling.sampling_dispatch(generation_id=generation.pk)
    chunk = SampleChunk.objects.filter(run__generation=generation).first()
    assert chunk is not None
    token = sampling.sample_chunk_claim(chunk_id=chunk.pk)
    assert token is not None
    assert sampling.chunk_sample(chunk=chunk, token=token, sampler=solution_sampler(), n=3, generation_number=0) == 6
    sample = SolutionSample.objects.filter(run__generation=generation).first()
    assert sample is not None
    sample.pk = None

    with (
        pytest.raises(IntegrityError, match=r"solution_sample_slot_once|UNIQUE constraint failed"),
        transaction.atomic(),
    ):
        sample.save()


def test_sampling_needs_a_configured_generator(settings):
    settings.SAMPLING_BACKEND = "none"

    with pytest.raises(GenerationConfigError, match="sample_n needs a generator: set SAMPLING_BACKEND=openai"):
        generation_start(config=config(sample_n=2))
    assert not Generation.objects.exists()


@pytest.mark.parametrize("value", [-1, 1001, True, "3"])
def test_sample_n_is_bounded(value):
    with pytest.raises(GenerationConfigError, match=r"sample_n must lie in \[0, 1000\]"):
        generation_start(config=config(sample_n=value))


def test_the_reconciler_re_enqueues_a_sampling_chunk_whose_worker_died(server, settings):
    generation = generation_start(config=sampled_config())
    sampling.sampling_dispatch(generation_id=generation.pk)
    chunk = SampleChunk.objects.filter(run__generation=generation).order_by("ordinal").first()
    assert chunk is not None
    assert sampling.sample_chunk_claim(chunk_id=chunk.pk) is not None
    long_ago = timezone.now() - timedelta(seconds=settings.PIPELINE_HEARTBEAT_STALE_S + 5)
    SampleChunk.objects.filter(pk=chunk.pk).update(heartbeat_at=long_ago, enqueued_at=long_ago)

    report = pipeline_reconcile()

    assert report.chunks_requeued == [chunk.pk]
    assert sampling.sample_chunk_run(chunk_id=chunk.pk) == 6


def test_the_local_backend_samples_in_the_gpu_worker_from_a_real_model(
    sampling_settings, tmp_path, django_capture_on_commit_callbacks
):
    from tests.activelearn.stepgen.conftest import build_tiny_causal_lm

    sampling_settings.SAMPLING_BACKEND = "local"
    sampling_settings.SAMPLING_LOCAL_MODEL_DIR = str(build_tiny_causal_lm(tmp_path / "tiny-lm"))
    sampling_settings.SAMPLING_LOCAL_DEVICE = "cpu"
    sampling_settings.SAMPLING_MAX_TOKENS = 12
    problems(2)
    generation = generation_start(config=config(sample_n=2, split="test"))
    with django_capture_on_commit_callbacks() as callbacks:
        sampling.sampling_dispatch(generation_id=generation.pk)
    [chunk] = SampleChunk.objects.filter(run__generation=generation)
    assert queued(callbacks) == [("generation_sample_chunk_task", (chunk.pk,), "test-gpu")]

    assert sampling.sample_chunk_run(chunk_id=chunk.pk) == 4

    draws = SolutionSample.objects.filter(run__generation=generation)
    assert draws.count() == 4
    assert {(d.generator, d.model) for d in draws} == {("local", sampling_settings.SAMPLING_LOCAL_MODEL_DIR)}
    assert all(d.request_id.startswith("local-") and d.endpoint.endswith("on cpu") for d in draws)
    generation.refresh_from_db()
    assert generation.status == S.REQUESTED
