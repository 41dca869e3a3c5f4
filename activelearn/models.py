"""PRM checkpoints and the scores they give solutions."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from labeling.models import Solution


class CheckpointStatus(models.TextChoices):
    TRAINING = "training", "training"
    READY = "ready", "ready"
    FAILED = "failed", "failed"


class PRMCheckpoint(models.Model):
    """One training run of the process reward model and where it was saved.

    State changes go through ``activelearn.checkpoints.checkpoint_transition`` only.
    """

    # The final model directory; empty until READY.
    path = models.CharField(max_length=500, blank=True, default="")
    # The run's working directory (intermediate checkpoints). Kept on the row so that a
    # re-run of the same checkpoint resumes from its last saved step instead of starting over.
    output_dir = models.CharField(max_length=500, blank=True, default="")
    base_model = models.CharField(max_length=500)
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
            # Scoring loads ``path``: a READY row without one would fail every scoring chunk.
            models.CheckConstraint(
                condition=~Q(status=CheckpointStatus.READY) | ~Q(path=""), name="prm_checkpoint_ready_has_path"
            ),
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
        return f"checkpoint {self.pk} ({self.base_model})"


class SolutionScore(models.Model):
    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="scores")
    checkpoint = models.ForeignKey(PRMCheckpoint, on_delete=models.CASCADE, related_name="scores")
    score = models.FloatField()
    step_scores = models.JSONField(default=list)
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
