"""PRM checkpoints and the scores they give solutions."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from labeling.models import GenerationStatus, Problem, Solution


class CheckpointStatus(models.TextChoices):
    TRAINING = "training", "training"
    READY = "ready", "ready"
    FAILED = "failed", "failed"


class CheckpointObjective(models.TextChoices):
    # A process reward model: trained on human step labels (outcome labels may join them).
    PROCESS = "process", "PRM"
    # An outcome reward model: trained on the grader's final-answer verdicts alone and read
    # at a solution's final step (Lightman et al. 2023, section 2.5).
    OUTCOME = "outcome", "ORM"


class PRMCheckpoint(models.Model):
    """One training run of the process (or outcome) reward model and where it was saved.

    State changes go through ``activelearn.checkpoints.checkpoint_transition`` only.
    """

    # This training run's identity: it names the output directory and is written into the
    # directory's manifest, so a run never adopts files written by another one (row ids are
    # reused after a restore or a recreated database; a random id is not).
    run_id = models.UUIDField(default=uuid.uuid4, editable=False)
    # The final model directory; empty until READY.
    path = models.CharField(max_length=500, blank=True, default="")
    # The run's working directory (intermediate checkpoints). Kept on the row so that a
    # re-run of the same checkpoint resumes from its last saved step instead of starting over.
    output_dir = models.CharField(max_length=500, blank=True, default="")
    base_model = models.CharField(max_length=500)
    # What it was trained to predict (TrainConfig.objective); an ORM's solution score is
    # its final step's (activelearn.checkpoints.checkpoint_aggregation).
    objective = models.CharField(
        max_length=10, choices=CheckpointObjective.choices, default=CheckpointObjective.PROCESS
    )
    status = models.CharField(max_length=20, choices=CheckpointStatus.choices, default=CheckpointStatus.TRAINING)
    # The newest generation whose labels the run saw (null: none / phase 1 only).
    trained_through_generation = models.IntegerField(null=True, blank=True)
    hyperparameters = models.JSONField(default=dict, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    examples_seen = models.PositiveIntegerField(default=0)
    duration_s = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    # Optimizer steps done / planned, for progress display.
    steps_done = models.PositiveIntegerField(default=0)
    steps_total = models.PositiveIntegerField(default=0)
    # Bumped from the training progress callback; a TRAINING row whose heartbeat is old
    # belongs to a dead worker (what a reconciler looks for).
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Chosen on the validation solutions when training ends (activelearn.prm.calibration):
    # the P(fine) below which a step is the first error, and the step-score aggregation
    # that ranks whole solutions best. Evaluation, scoring and selection use them; null /
    # "" for a checkpoint trained without validation data (they fall back to 0.5 / min).
    threshold = models.FloatField(null=True, blank=True)
    aggregation = models.CharField(max_length=10, blank=True, default="")
    # How they were chosen (per-aggregation AUROC, validation F1 at the threshold).
    calibration = models.JSONField(default=dict, blank=True)
    # Held-out metrics written by checkpoint_evaluate (keys documented in docs/prm.md);
    # separate from ``metrics`` (training) so the two writers never overwrite each other.
    evaluation = models.JSONField(default=dict, blank=True)
    evaluated_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(aggregation__in=["", "min", "product", "mean", "last"]),
                name="prm_checkpoint_aggregation_known",
            ),
            models.CheckConstraint(
                condition=Q(threshold__isnull=True) | (Q(threshold__gte=0) & Q(threshold__lte=1)),
                name="prm_checkpoint_threshold_is_probability",
            ),
            # Scoring and selection branch on it; an unknown kind would read as a PRM.
            models.CheckConstraint(
                condition=Q(objective__in=CheckpointObjective.values), name="prm_checkpoint_objective_known"
            ),
            # Scoring loads ``path``: a READY row without one would fail every scoring chunk.
            models.CheckConstraint(
                condition=~Q(status=CheckpointStatus.READY) | ~Q(path=""), name="prm_checkpoint_ready_has_path"
            ),
            models.UniqueConstraint(fields=["run_id"], name="prm_checkpoint_run_id_unique"),
        ]
        indexes = [
            # The reconciler: TRAINING rows with a stale heartbeat.
            models.Index(
                fields=["heartbeat_at"],
                condition=Q(status=CheckpointStatus.TRAINING),
                name="prm_checkpoint_training_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"checkpoint {self.pk} ({self.get_objective_display()}, {self.base_model})"


class SolutionScore(models.Model):
    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="scores")
    checkpoint = models.ForeignKey(PRMCheckpoint, on_delete=models.CASCADE, related_name="scores")
    score = models.FloatField()
    step_scores = models.JSONField(default=list)
    # The aggregation ``score`` was computed with; ``step_scores`` allow any other.
    reduction = models.CharField(max_length=10, default="product")
    scored_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # Re-scoring with the same checkpoint upserts instead of duplicating.
            models.UniqueConstraint(fields=["solution", "checkpoint"], name="solution_score_once_per_checkpoint"),
            models.CheckConstraint(condition=Q(score__gte=0) & Q(score__lte=1), name="solution_score_is_probability"),
        ]
        indexes = [
            # Selection: best-scored solutions of a checkpoint.
            models.Index(fields=["checkpoint", "-score"], name="solution_score_rank_idx"),
        ]


# --- The generation pipeline (activelearn.generations) ------------------------------


class GenerationRun(models.Model):
    """The pipeline's bookkeeping for one generation: config, progress, timings, claims.

    ``Generation.status`` stays the source of truth for where the run is; ``step`` is the
    running step this row last entered, which a retry of a FAILED generation resumes.
    Every status change goes through ``activelearn.generations.machine.generation_transition``.
    """

    generation = models.OneToOneField("labeling.Generation", on_delete=models.CASCADE, related_name="run")
    # GenerationConfig.to_json(): validated by the dataclass when the run is started.
    config = models.JSONField(default=dict)
    step = models.CharField(max_length=20, choices=GenerationStatus.choices, default=GenerationStatus.REQUESTED)
    checkpoint = models.ForeignKey(
        PRMCheckpoint, null=True, blank=True, on_delete=models.PROTECT, related_name="generation_runs"
    )
    # Progress, refreshed by the step that owns it.
    scored = models.PositiveIntegerField(default=0)
    score_total = models.PositiveIntegerField(default=0)
    graded = models.PositiveIntegerField(default=0)
    grade_total = models.PositiveIntegerField(default=0)
    selected = models.PositiveIntegerField(default=0)
    # The sampling step (activelearn.generations.sampling): draws stored / asked for.
    sampled = models.PositiveIntegerField(default=0)
    sample_total = models.PositiveIntegerField(default=0)
    qc_injected = models.PositiveIntegerField(default=0)
    # How the selection came out (wrong-answer picks, rest picks, shortfalls).
    selection_stats = models.JSONField(default=dict, blank=True)
    step_started_at = models.DateTimeField(null=True, blank=True)
    sampling_started_at = models.DateTimeField(null=True, blank=True)
    sampling_finished_at = models.DateTimeField(null=True, blank=True)
    training_started_at = models.DateTimeField(null=True, blank=True)
    training_finished_at = models.DateTimeField(null=True, blank=True)
    scoring_started_at = models.DateTimeField(null=True, blank=True)
    scoring_finished_at = models.DateTimeField(null=True, blank=True)
    grading_started_at = models.DateTimeField(null=True, blank=True)
    grading_finished_at = models.DateTimeField(null=True, blank=True)
    selecting_started_at = models.DateTimeField(null=True, blank=True)
    selecting_finished_at = models.DateTimeField(null=True, blank=True)
    # Liveness of the CPU steps (prepare, grading, selecting). Null while the step's task
    # has not claimed it yet; a claim succeeds only on a null or stale heartbeat, so two
    # workers never run the same step at once. Training has the checkpoint's heartbeat,
    # scoring the chunks' heartbeats.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # When the current step's work was last enqueued: the reconciler's clock for a step
    # nobody has claimed yet (a message lost with its worker), and its rate limit.
    dispatched_at = models.DateTimeField(null=True, blank=True)
    # Claims of the current step (reset when a step is entered or retried): a step that
    # keeps dying (hard time limit, OOM) is failed after PIPELINE_MAX_ATTEMPTS.
    step_attempts = models.PositiveIntegerField(default=0)
    retries = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"run of generation {self.generation_id}"


class ScoreChunkStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    DONE = "done", "done"
    FAILED = "failed", "failed"


class ScoreChunk(models.Model):
    """A slice of a generation's pool that one GPU worker scores (activelearn.generations).

    ``solution_ids`` freezes the slice when scoring starts, so a redelivered or re-enqueued
    chunk scores the same solutions however the pool changed since.
    """

    run = models.ForeignKey(GenerationRun, on_delete=models.CASCADE, related_name="chunks")
    first_id = models.PositiveBigIntegerField()
    last_id = models.PositiveBigIntegerField()
    solution_ids = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=ScoreChunkStatus.choices, default=ScoreChunkStatus.PENDING)
    # The claimant's token: only it may heartbeat or finish the chunk, so a worker that
    # lost its claim to the reconciler cannot mark someone else's work done.
    claim_token = models.CharField(max_length=32, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Last time a message for this chunk was sent; the reconciler re-sends a stale RUNNING
    # chunk at most once per stale interval.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    scored = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "first_id"]
        constraints = [
            # Chunk creation is re-run by every dispatch of the scoring step; the same
            # slice must not become two rows.
            models.UniqueConstraint(fields=["run", "first_id"], name="score_chunk_unique_start"),
            models.CheckConstraint(condition=Q(first_id__lte=models.F("last_id")), name="score_chunk_range_ordered"),
        ]
        indexes = [
            # The reconciler and "is scoring finished": a run's chunks that are not done.
            models.Index(
                fields=["run", "status"], condition=~Q(status=ScoreChunkStatus.DONE), name="score_chunk_open_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"chunk {self.first_id}-{self.last_id} of run {self.run_id}"


class SampleChunkStatus(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    DONE = "done", "done"
    FAILED = "failed", "failed"


class SampleChunk(models.Model):
    """A slice of a generation's problems that one worker samples (activelearn.generations.sampling).

    ``problem_ids`` freezes the slice when sampling starts, so a redelivered or re-enqueued
    chunk samples the same problems however the problem set changed since. Claims work as
    for ``ScoreChunk``.
    """

    run = models.ForeignKey(GenerationRun, on_delete=models.CASCADE, related_name="sample_chunks")
    ordinal = models.PositiveIntegerField()
    problem_ids = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=SampleChunkStatus.choices, default=SampleChunkStatus.PENDING)
    claim_token = models.CharField(max_length=32, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # Draws stored for the chunk's problems.
    sampled = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "ordinal"]
        constraints = [
            # Chunk creation is re-run by every dispatch of the sampling step; the same
            # slice must not become two rows.
            models.UniqueConstraint(fields=["run", "ordinal"], name="sample_chunk_unique_ordinal"),
        ]
        indexes = [
            # The reconciler and "is sampling finished": a run's chunks that are not done.
            models.Index(
                fields=["run", "status"], condition=~Q(status=SampleChunkStatus.DONE), name="sample_chunk_open_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"sample chunk {self.ordinal} of run {self.run_id}"


class SolutionSample(models.Model):
    """One draw of a generation's sampling step: what was asked, how, and the solution it became.

    A draw whose steps and answer equal a solution the problem already has (from the same
    model) points at that solution: the content is stored once, every draw is recorded.
    """

    run = models.ForeignKey(GenerationRun, on_delete=models.CASCADE, related_name="samples")
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="+")
    # 0..N-1 among the problem's draws in this run.
    index = models.PositiveIntegerField()
    # Null: the draw held no step (empty text).
    solution = models.ForeignKey(Solution, null=True, blank=True, on_delete=models.CASCADE, related_name="samples")
    # Provenance: the backend ("openai", "local"), the model it served, where (URL or
    # device), the server's request id and the choice's index in that response, the seed
    # the request carried, and the sampling parameters (temperature, top_p, max_tokens,
    # prompt template).
    generator = models.CharField(max_length=20)
    model = models.CharField(max_length=200)
    endpoint = models.CharField(max_length=500, blank=True, default="")
    request_id = models.CharField(max_length=200, blank=True, default="")
    choice_index = models.PositiveIntegerField(default=0)
    seed = models.BigIntegerField(null=True, blank=True)
    params = models.JSONField(default=dict)
    finish_reason = models.CharField(max_length=20, blank=True, default="")
    # The completion as the backend returned it, before splitting into steps.
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "problem_id", "index"]
        constraints = [
            # A draw slot is filled once: a chunk re-run after its worker was killed, or two
            # workers racing on a stale claim, cannot add an N+1-th draw for a problem.
            models.UniqueConstraint(fields=["run", "problem", "index"], name="solution_sample_slot_once"),
        ]
        indexes = [
            # The scoring step's pool: the run's sampled solutions.
            models.Index(fields=["run", "solution"], name="solution_sample_pool_idx"),
        ]

    def __str__(self) -> str:
        return f"draw {self.index} of problem {self.problem_id} in run {self.run_id}"
