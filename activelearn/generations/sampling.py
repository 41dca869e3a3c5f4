"""Services: a generation's own pool, sampled from the generator at its start.

    sampling ─▶ requested ─▶ training ─▶ scoring ─▶ ...   (with ``sample_n`` > 0)

N solutions per problem (the generation's problems: ``problem_ids`` and ``split``) from an
OpenAI-compatible server (vLLM, SGLang, llama.cpp's server) or a local causal LM, in
the newline-step format: a draw's text is split into steps by the one splitter
(``mathtext.splitting``), ending at its ``# Answer`` step, and its final
answer is read by the one extractor. The pool that the generation then scores is the
solutions its draws became.

Like scoring, the work is frozen into chunks once (``SampleChunk``: problem ids,
``PIPELINE_SAMPLE_CHUNK_PROBLEMS`` each) and a chunk is claimed with a conditional UPDATE
(pending, or running with a stale heartbeat) and a token only its claimant holds.

* A problem's N draws are written in one transaction that first locks the chunk row
  and re-checks the token, so a worker that lost its claim writes nothing; a worker
  killed mid-chunk leaves whole problems or none, and the re-run samples only the
  problems without draws.
* Every draw is a ``SolutionSample`` row (the provenance: backend, model, endpoint,
  request id, choice, seed, sampling parameters, raw text); ``solution_sample_slot_once``
  makes a draw slot (run, problem, index) exist once whatever runs twice.
* Deduplication: a draw whose steps and answer equal a solution the problem already
  has from the same model points at it (``solution_unique_per_problem``), so a draw
  repeated within a generation, or across generations, is one solution.
* Grading: the chunk's new solutions are graded by ``answer_grading.solutions_grade``
  before the chunk is done (the grading step then finds them graded).
* Failures: the client retries with backoff (``SAMPLING_RETRIES``, ``SAMPLING_BACKOFF_S``);
  what is still failing after them fails the chunk and the generation with the
  problem and the server named; ``generation_retry`` hands the chunk back and
  sampling resumes at the first problem without draws.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from activelearn.generations.config import GenerationConfig
from activelearn.generations.dispatch import generation_dispatch
from activelearn.generations.liveness import Pulse
from activelearn.generations.machine import chunk_claim, generation_fail, generation_transition
from activelearn.generations.sampler import sampling_queue, solution_sampler
from activelearn.models import GenerationRun, SampleChunk, SampleChunkStatus, SolutionSample
from activelearn.stepgen.base import SolutionDraw, SolutionSampler, StepGenerationError
from annotate.celery import send_after_commit
from labeling.models import Generation, GenerationStatus, Problem, Solution, content_sha256
from mathtext.extraction import extract_final_answer
from mathtext.splitting import is_answer_step, split_steps

logger = logging.getLogger(__name__)

ERROR_MAX = 10_000
_GENERATOR_MAX = Solution._meta.get_field("generator").max_length or 200
_SOURCE_KEY_MAX = Solution._meta.get_field("source_key").max_length or 255
_MODEL_MAX = Solution._meta.get_field("source_model").max_length or 200


class SamplingError(Exception):
    """A problem could not be sampled; the message names the problem and the server."""


# --- Draws to solutions (plain rules) ---------------------------------------------------


def draw_steps(text: str) -> list[str]:
    """A draw's steps in the newline-step format, through its answer step: a model that
    writes on past its answer (a next problem, say) finished the solution there."""
    steps = split_steps(text)
    for index, step in enumerate(steps):
        if is_answer_step(step):
            return steps[: index + 1]
    return steps


def problem_seed(*, base: int | None, generation_number: int | None, problem_unique_id: str) -> int | None:
    """The seed of a problem's first draw: None (the server's randomness) without a base seed.

    Mixed with the generation number, so each generation draws a fresh pool, and with the
    problem, so problems differ; stable, so a retry redraws the same texts (which then
    deduplicate). 30 bits, so that seed + N stays within every server's 32-bit seed.
    """
    if base is None:
        return None
    digest = hashlib.sha256(f"{base}/{generation_number}/{problem_unique_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x3FFFFFFF


# --- Chunks and claims -------------------------------------------------------------------


def sampling_problem_ids(*, problem_ids: Sequence[str] | None, split: str | None) -> list[int]:
    """The problems a generation samples (Problem pks, in id order): those named, of the split."""
    queryset = Problem.objects.all()
    if problem_ids is not None:
        queryset = queryset.filter(unique_id__in=problem_ids)
    if split is not None:
        queryset = queryset.filter(split=split)
    return list(queryset.order_by("id").values_list("id", flat=True))


def sample_chunks_create(*, run: GenerationRun, problem_ids: Sequence[int], n: int) -> int:
    """Freeze the problems into chunks, once per run; returns how many chunks the run has."""
    with transaction.atomic():
        # Serialises concurrent dispatchers: only the first one finds no chunks.
        GenerationRun.objects.select_for_update().filter(pk=run.pk).first()
        existing = SampleChunk.objects.filter(run=run).count()
        if existing:
            return existing
        size = settings.PIPELINE_SAMPLE_CHUNK_PROBLEMS
        chunks = [
            SampleChunk(run=run, ordinal=ordinal, problem_ids=list(problem_ids[start : start + size]))
            for ordinal, start in enumerate(range(0, len(problem_ids), size))
        ]
        SampleChunk.objects.bulk_create(chunks)
        GenerationRun.objects.filter(pk=run.pk).update(sample_total=len(problem_ids) * n, sampled=0)
        return len(chunks)


def sample_chunks_enqueue(*, chunk_ids: Sequence[int]) -> None:
    SampleChunk.objects.filter(pk__in=chunk_ids).update(enqueued_at=timezone.now())
    limit = settings.PIPELINE_CPU_TIME_LIMIT_S
    for chunk_id in chunk_ids:
        send_after_commit(
            "activelearn.tasks.generation_sample_chunk_task",
            args=(chunk_id,),
            queue=sampling_queue(),
            soft_time_limit=limit,
            time_limit=limit + settings.PIPELINE_HARD_LIMIT_GRACE_S,
        )


def sample_chunk_claim(*, chunk_id: int) -> str | None:
    """Claim a chunk (``machine.chunk_claim``): the token, or None."""
    return chunk_claim(model=SampleChunk, chunk_id=chunk_id)


def problems_unsampled(*, run_id: int, problem_ids: Sequence[int]) -> list[int]:
    """Those of ``problem_ids`` with no draws in the run yet (a problem's draws are written together)."""
    done = set(
        SolutionSample.objects.filter(run_id=run_id, problem_id__in=problem_ids).values_list("problem_id", flat=True)
    )
    return [problem_id for problem_id in problem_ids if problem_id not in done]


def problem_draws_store(
    *,
    chunk_id: int,
    token: str,
    run_id: int,
    problem_id: int,
    draws: Sequence[SolutionDraw],
    sampler: SolutionSampler,
    generator: str,
) -> int | None:
    """Store one problem's draws, if ``token`` still holds the chunk; None when it does not.

    Returns how many draws were stored: 0 when the problem had its draws already.
    ``generator`` is what ``Solution.generator`` says produced the new solutions.
    """
    model = sampler.model_name[:_MODEL_MAX]
    shaped = []
    for draw in draws:
        steps = draw_steps(draw.text)
        answer = extract_final_answer("\n".join(steps)) if steps else None
        shaped.append((draw, steps, content_sha256(steps, answer) if steps else "", answer))
    params = {
        "temperature": sampler.params.temperature,
        "top_p": sampler.params.top_p,
        "max_tokens": sampler.params.max_tokens,
        "prompt_template": sampler.prompt_template.template,
    }
    with transaction.atomic():
        # The lock orders this write after any other claimant's: a worker whose claim went
        # stale and was taken finds the token changed and writes nothing.
        if not (
            SampleChunk.objects.select_for_update()
            .filter(pk=chunk_id, claim_token=token, status=SampleChunkStatus.RUNNING)
            .exists()
        ):
            return None
        if SolutionSample.objects.filter(run_id=run_id, problem_id=problem_id).exists():
            return 0  # written by this claim's predecessor before it lost the chunk
        contents = {content: (draw, steps, answer) for draw, steps, content, answer in shaped if steps}
        existing = set(
            Solution.objects.filter(
                problem_id=problem_id, source_model=model, content_sha256__in=list(contents)
            ).values_list("content_sha256", flat=True)
        )
        # ignore_conflicts: an import writing the same content meanwhile wins, and the draw
        # points at its row (read back below).
        Solution.objects.bulk_create(
            [
                Solution(
                    problem_id=problem_id,
                    steps=steps,
                    content_sha256=content,
                    final_answer=answer,
                    source_model=model,
                    generator=generator[:_GENERATOR_MAX],
                    source_key=f"{draw.request_id}#{draw.choice_index}"[:_SOURCE_KEY_MAX] if draw.request_id else "",
                )
                for content, (draw, steps, answer) in contents.items()
                if content not in existing
            ],
            ignore_conflicts=True,
        )
        ids = dict(
            Solution.objects.filter(
                problem_id=problem_id, source_model=model, content_sha256__in=list(contents)
            ).values_list("content_sha256", "pk")
        )
        SolutionSample.objects.bulk_create(
            [
                SolutionSample(
                    run_id=run_id,
                    problem_id=problem_id,
                    index=index,
                    solution_id=ids[content] if steps else None,
                    generator=sampler.name,
                    model=model,
                    endpoint=sampler.endpoint[:500],
                    request_id=draw.request_id[:200],
                    choice_index=draw.choice_index,
                    seed=draw.seed,
                    params=params,
                    finish_reason=draw.finish_reason[:20],
                    text=draw.text,
                )
                for index, (draw, steps, content, _) in enumerate(shaped)
            ]
        )
        SampleChunk.objects.filter(pk=chunk_id).update(sampled=F("sampled") + len(draws), heartbeat_at=timezone.now())
    return len(draws)


def chunk_sample(
    *,
    chunk: SampleChunk,
    token: str,
    sampler: SolutionSampler,
    n: int,
    generation_number: int | None,
    pulse: Pulse | None = None,
) -> int | None:
    """Draw and store ``n`` solutions for each of the chunk's problems without draws yet.

    Returns the draws stored by this call, None when the claim was lost on the way.
    Requests for up to ``SAMPLING_CONCURRENCY`` problems are in flight at once (one for
    the local backend); their answers are written from this thread as they come.
    """
    todo = problems_unsampled(run_id=chunk.run_id, problem_ids=[int(p) for p in chunk.problem_ids])
    problems = {
        pk: (uid, text)
        for pk, uid, text in Problem.objects.filter(pk__in=todo).values_list("pk", "unique_id", "problem")
    }
    generator = f"sampling, generation {generation_number}"
    workers = 1 if sampler.name == "local" else settings.SAMPLING_CONCURRENCY
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sampling")
    futures: dict[Future[list[SolutionDraw]], int] = {}
    stored = 0
    try:
        for problem_id in todo:
            if problem_id not in problems:
                continue  # deleted since the chunk was frozen
            uid, text = problems[problem_id]
            seed = problem_seed(base=sampler.params.seed, generation_number=generation_number, problem_unique_id=uid)
            futures[pool.submit(sampler.sample_solutions, problem=text, n=n, seed=seed)] = problem_id
        for future in as_completed(futures):
            problem_id = futures[future]
            try:
                draws = future.result()
            except StepGenerationError as error:
                raise SamplingError(
                    f"sampling problem {problems[problem_id][0]!r} from {sampler.endpoint}: {error}"
                ) from error
            if len(draws) != n:
                raise SamplingError(
                    f"sampling problem {problems[problem_id][0]!r} from {sampler.endpoint}: "
                    f"{len(draws)} draws instead of {n}"
                )
            written = problem_draws_store(
                chunk_id=chunk.pk,
                token=token,
                run_id=chunk.run_id,
                problem_id=problem_id,
                draws=draws,
                sampler=sampler,
                generator=generator,
            )
            if written is None:
                return None
            stored += written
            if pulse is not None:
                pulse.tick()
    finally:
        # Requests still in flight are abandoned, not awaited: a dead server must fail the
        # chunk now, not after every queued problem has timed out.
        pool.shutdown(wait=False, cancel_futures=True)
    return stored


def chunk_grade(*, chunk: SampleChunk, timeout_s: float) -> int:
    """Grade the chunk's sampled solutions never graded, by the product's one grader."""
    from activelearn.grading.service import solutions_grade

    ungraded = (
        SolutionSample.objects.filter(
            run_id=chunk.run_id,
            problem_id__in=[int(p) for p in chunk.problem_ids],
            solution__is_correct__isnull=True,
            solution__grading_note="",
        )
        .values_list("solution_id", flat=True)
        .distinct()
    )
    ids = [i for i in ungraded if i is not None]
    # No grading processes are started for nothing (a re-run whose draws were graded).
    return solutions_grade(solution_ids=ids, timeout_s=timeout_s) if ids else 0


def sampled_refresh(*, run_id: int) -> None:
    total = SampleChunk.objects.filter(run_id=run_id).aggregate(total=Sum("sampled"))["total"] or 0
    GenerationRun.objects.filter(pk=run_id).update(sampled=total)


# --- The step -------------------------------------------------------------------------


def sampling_dispatch(*, generation_id: int) -> None:
    """SAMPLING: freeze the problems into chunks (once) and enqueue every chunk not done;
    → REQUESTED once none is left. Safe to repeat (the reconciler does)."""
    run = GenerationRun.objects.select_related("generation").filter(generation_id=generation_id).first()
    if run is None or run.generation.status != GenerationStatus.SAMPLING:
        return
    config = GenerationConfig.from_json(run.config)
    problem_ids = sampling_problem_ids(problem_ids=config.problem_ids, split=config.split)
    sample_chunks_create(run=run, problem_ids=problem_ids, n=config.sample_n)
    chunk_ids = list(run.sample_chunks.exclude(status=SampleChunkStatus.DONE).values_list("pk", flat=True))
    if not chunk_ids:
        _sampling_finish(run=run)
        return
    with transaction.atomic():
        GenerationRun.objects.filter(pk=run.pk).update(dispatched_at=timezone.now())
        sample_chunks_enqueue(chunk_ids=chunk_ids)


def sample_chunk_run(*, chunk_id: int) -> int:
    """Sample one chunk if this call can claim it; returns the draws stored by this call."""
    token = sample_chunk_claim(chunk_id=chunk_id)
    if token is None:
        return 0
    chunk = SampleChunk.objects.select_related("run__generation").get(pk=chunk_id)
    run = chunk.run
    mine = SampleChunk.objects.filter(pk=chunk_id, claim_token=token, status=SampleChunkStatus.RUNNING)
    if not Generation.objects.filter(pk=run.generation_id, status=GenerationStatus.SAMPLING).exists():
        # Failed or moved on meanwhile: hand the chunk back for a retry to pick up.
        mine.update(status=SampleChunkStatus.PENDING, claim_token="")
        return 0
    config = GenerationConfig.from_json(run.config)
    try:
        # The pulse covers loading a local model and every request (activelearn.generations.liveness).
        with Pulse(lambda: mine.update(heartbeat_at=timezone.now()) == 1) as pulse:
            sampler = solution_sampler()
            stored = chunk_sample(
                chunk=chunk, token=token, sampler=sampler, n=config.sample_n,
                generation_number=run.generation.number, pulse=pulse,
            )  # fmt: skip
            if stored is None:
                logger.warning("sample chunk %s: claim lost to another worker; stopping", chunk_id)
                return 0
            sampled_refresh(run_id=run.pk)
            chunk_grade(chunk=chunk, timeout_s=config.grade_timeout_s)
    except Exception as error:
        message = str(error) if isinstance(error, SamplingError) else f"{type(error).__name__}: {error}"
        mine.update(status=SampleChunkStatus.FAILED, error=message[:ERROR_MAX], finished_at=timezone.now())
        generation_fail(generation_id=run.generation_id, error=message, step=GenerationStatus.SAMPLING)
        raise
    if mine.update(status=SampleChunkStatus.DONE, finished_at=timezone.now()) != 1:
        return stored
    _sampling_finish(run=run)
    return stored


def _sampling_finish(*, run: GenerationRun) -> None:
    """SAMPLING → REQUESTED once no chunk is left (then the generation trains or scores
    as any other). Each finisher checks after its own commit, so the last one always sees
    all done; the conditional transition lets only one of several advance."""
    if SampleChunk.objects.filter(run_id=run.pk).exclude(status=SampleChunkStatus.DONE).exists():
        return
    sampled_refresh(run_id=run.pk)
    with transaction.atomic():
        if generation_transition(
            generation_id=run.generation_id, from_=GenerationStatus.SAMPLING, to=GenerationStatus.REQUESTED
        ):
            generation_dispatch(generation_id=run.generation_id)
