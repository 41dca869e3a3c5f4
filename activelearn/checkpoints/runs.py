"""Services: train a PRM checkpoint from stored labels, and its row's state machine.

A ``PRMCheckpoint`` row is created first (TRAINING, with its hyperparameters and its own
output directory), then trained by ``checkpoint_run`` in a GPU worker. The row keeps the
output directory, so running the same checkpoint again (a redelivered Celery task, a
manual retry) resumes from the newest intermediate checkpoint in it.

torch/transformers are imported inside the functions that train: the web process imports
this module to create rows and enqueue work, and must never load them.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.utils import timezone

from activelearn.checkpoints.training_data import (
    OutcomeDataFilters,
    OverlappingSplitsError,
    TrainingDataFilters,
    TrainingSet,
    training_set_build,
)
from activelearn.generations.liveness import Pulse
from activelearn.models import CheckpointObjective, CheckpointStatus, PRMCheckpoint
from activelearn.prm.recipes import AGGREGATIONS, CHOOSE_AGGREGATION, nonnegative_option_check, recipe_for

if TYPE_CHECKING:
    from activelearn.prm.adaptation import AdaptConfig
    from activelearn.prm.scoring import Reduction

logger = logging.getLogger(__name__)

# The TrainConfig fields a caller may override (output_dir belongs to the row). Kept as
# a literal so that validating a request does not import torch; a test pins it to
# TrainConfig's fields.
TRAIN_CONFIG_KEYS = frozenset(
    {
        "learning_rate",
        "weight_decay",
        "num_epochs",
        "max_steps",
        "batch_size",
        "gradient_accumulation_steps",
        "warmup_ratio",
        "lr_scheduler",
        "max_grad_norm",
        "max_length",
        "max_problem_tokens",
        "freeze_layers",
        "step_features",
        "backbone_layers",
        "head_l2",
        "aggregation",
        "threshold_decay",
        "class_weighting",
        "val_fraction",
        "split_salt",
        "seed",
        "mega_batch_batches",
        "checkpoint_every",
        "keep_checkpoints",
        "bf16",
        "gradient_checkpointing",
        "eval_batch_size",
        "cpu",
        "neutral",
        "objective",
        "outcome_weight",
        "outcome_targets",
        "adapter",
        "lora_rank",
        "lora_alpha",
        "processes",
    }
)
# The options that say how outcome labels count in a process run (TrainConfig).
OUTCOME_MIX_KEYS = frozenset({"outcome_weight", "outcome_targets"})
# activelearn.prm.modeling.STEP_FEATURES' names, a literal for the same reason (pinned by
# the same test).
STEP_FEATURE_NAMES = frozenset({"surprise", "span"})
# What a checkpoint without a calibration (trained without validation data) uses: "min"
# because "product" rewards short solutions.
DEFAULT_THRESHOLD = 0.5
DEFAULT_AGGREGATION = "min"
# A TRAINING row's heartbeat is refreshed at most this often (one UPDATE per step would
# be wasteful with fast steps); a reconciler should allow several intervals of slack.
HEARTBEAT_INTERVAL_S = 10.0
LOSS_CURVE_POINTS = 100

# (optimizer step, total steps, loss)
Progress = Callable[[int, int, float], None]
# One validation report per epoch (activelearn.prm.training.EpochReport, as a dict).
EpochCallback = Callable[[dict[str, Any]], None]

# Which statuses a row may move to, from which. FAILED → TRAINING is a retry (it resumes);
# READY is final.
_ALLOWED_FROM: dict[str, frozenset[str]] = {
    CheckpointStatus.TRAINING: frozenset({CheckpointStatus.FAILED}),
    CheckpointStatus.READY: frozenset({CheckpointStatus.TRAINING}),
    CheckpointStatus.FAILED: frozenset({CheckpointStatus.TRAINING}),
}


class NoTrainingDataError(ValueError):
    """No submitted labels match the filters."""


class BackboneMissingError(ValueError):
    """The backbone spec is not a builtin name and not an existing directory."""


class SplitSelectionError(ValueError):
    """Training and validation selections overlap (re-raised from the selector)."""


class CheckpointStoppedError(RuntimeError):
    """The row left TRAINING while the run was going (failed by someone else): stop."""


def checkpoint_aggregation(*, checkpoint: PRMCheckpoint) -> Reduction:
    """The solution-score aggregation chosen on validation, or the default; an ORM's is
    always "last": it was trained to score the whole solution at its final step."""
    if checkpoint.objective == CheckpointObjective.OUTCOME:
        return "last"
    return cast("Reduction", checkpoint.aggregation or DEFAULT_AGGREGATION)


def checkpoint_threshold(*, checkpoint: PRMCheckpoint) -> float:
    """The first-error threshold chosen on validation, or the default."""
    return DEFAULT_THRESHOLD if checkpoint.threshold is None else checkpoint.threshold


def checkpoint_threshold_decay(*, checkpoint: PRMCheckpoint) -> float:
    """How far the checkpoint's first-error threshold falls along a solution, in its logits
    per log(1 + step index) (prm.evaluation.decayed_scores); 0 (flat) without a calibration."""
    return float((checkpoint.calibration or {}).get("threshold_decay", 0.0))


class BackboneAdaptationError(ValueError):
    """Continued LM training was asked for a backbone or a selection it cannot run on."""


def backbone_check(*, spec: str) -> None:
    """Cheap validation without loading torch: a builtin name or a local directory."""
    if spec.startswith(("builtin:", "tiny:")):
        return
    if not Path(spec).expanduser().is_dir():
        raise BackboneMissingError(f"backbone directory {spec} does not exist")


def checkpoint_transition(*, checkpoint_id: int, to: CheckpointStatus, **fields: Any) -> bool:
    """Move a checkpoint to ``to`` if its current status allows it; False when it did not.

    A conditional UPDATE (not read-modify-write): two workers finishing or failing the same
    run cannot both win, and a READY row can never be overwritten by a late failure.
    """
    now = timezone.now()
    values: dict[str, Any] = {"status": to, **fields}
    if to == CheckpointStatus.TRAINING:
        values.setdefault("error", "")
        values.setdefault("finished_at", None)
        values.setdefault("heartbeat_at", now)
    else:
        values.setdefault("finished_at", now)
    updated = PRMCheckpoint.objects.filter(pk=checkpoint_id, status__in=_ALLOWED_FROM[to]).update(**values)
    return updated == 1


def checkpoint_alive(*, checkpoint_id: int) -> bool:
    """The training worker's pulse (activelearn.generations.liveness); False when the row left TRAINING."""
    return (
        PRMCheckpoint.objects.filter(pk=checkpoint_id, status=CheckpointStatus.TRAINING).update(
            heartbeat_at=timezone.now()
        )
        == 1
    )


def checkpoint_heartbeat(*, checkpoint_id: int, steps_done: int, steps_total: int) -> bool:
    """Record liveness and progress; False when the row is no longer TRAINING."""
    updated = PRMCheckpoint.objects.filter(pk=checkpoint_id, status=CheckpointStatus.TRAINING).update(
        heartbeat_at=timezone.now(), steps_done=steps_done, steps_total=steps_total
    )
    return updated == 1


def checkpoint_create(
    *,
    base_model: str,
    through_generation: int | None,
    filters: TrainingDataFilters | None = None,
    validation_filters: TrainingDataFilters | None = None,
    config: Mapping[str, Any] | None = None,
    output_root: Path | None = None,
    outcome_filters: OutcomeDataFilters | None = None,
    outcome_validation_filters: OutcomeDataFilters | None = None,
) -> PRMCheckpoint:
    """A TRAINING row with its hyperparameters and output directory; trains nothing.

    ``filters.through_generation`` is taken from ``through_generation``. Without
    ``validation_filters`` the labels are split by a hash of the problem id.
    ``config["objective"] == "outcome"`` makes an ORM, trained on the graded solutions of
    ``outcome_filters`` (validated on ``outcome_validation_filters``'); in a PRM run
    ``outcome_filters`` adds graded solutions as outcome labels (``outcome_weight``,
    ``outcome_targets``).
    """
    backbone_check(spec=base_model)
    overrides = dict(config or {})
    unknown = set(overrides) - TRAIN_CONFIG_KEYS
    if unknown:
        raise ValueError(f"unknown training option(s): {', '.join(sorted(unknown))}")
    objective_check(
        objective=overrides.get("objective", CheckpointObjective.PROCESS),
        overrides=overrides,
        outcome_filters=outcome_filters,
        outcome_validation_filters=outcome_validation_filters,
    )
    features = overrides.get("step_features")
    if features is not None and (not isinstance(features, list | tuple) or not set(features) <= STEP_FEATURE_NAMES):
        raise ValueError(f"step_features must be a list of {sorted(STEP_FEATURE_NAMES)}, got {features!r}")
    layers = overrides.get("backbone_layers")
    if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int) or layers < 1):
        raise ValueError(f"backbone_layers must be a whole number of layers >= 1, got {layers!r}")
    strengths = overrides.get("head_l2")
    if strengths is not None and (
        not isinstance(strengths, list | tuple)
        or not all(isinstance(x, int | float) and not isinstance(x, bool) and x > 0 for x in strengths)
    ):
        raise ValueError(f"head_l2 must be a list of L2 strengths > 0, got {strengths!r}")
    aggregation = overrides.get("aggregation")
    if aggregation is not None and aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {list(AGGREGATIONS)}, got {aggregation!r}")
    if overrides.get("threshold_decay") is not None:
        nonnegative_option_check("threshold_decay", overrides["threshold_decay"])
    base_filters = filters or TrainingDataFilters()
    data_filters = TrainingDataFilters.from_json({**base_filters.to_json(), "through_generation": through_generation})
    root = Path(output_root if output_root is not None else settings.CHECKPOINT_DIR)
    run_id = uuid.uuid4()
    checkpoint = PRMCheckpoint.objects.create(
        run_id=run_id,
        base_model=base_model,
        objective=overrides.get("objective", CheckpointObjective.PROCESS),
        trained_through_generation=through_generation,
        hyperparameters={
            "train": overrides,
            "data": data_filters.to_json(),
            "validation_data": None if validation_filters is None else validation_filters.to_json(),
            "outcome_data": None if outcome_filters is None else outcome_filters.to_json(),
            "outcome_validation_data": (
                None if outcome_validation_filters is None else outcome_validation_filters.to_json()
            ),
        },
        heartbeat_at=timezone.now(),
        # Named by the run id, never by the row id: ids are reused after a restore or a
        # recreated database, and a new run must not find an old run's files where it looks.
        output_dir=str(root / f"run-{run_id.hex}"),
    )
    return checkpoint


def objective_check(
    *,
    objective: str,
    overrides: Mapping[str, Any],
    outcome_filters: OutcomeDataFilters | None,
    outcome_validation_filters: OutcomeDataFilters | None,
) -> None:
    """Refuse a checkpoint request whose objective and outcome data do not fit together."""
    if objective not in CheckpointObjective.values:
        raise ValueError(f"objective must be one of {', '.join(CheckpointObjective.values)}, got {objective!r}")
    mix = sorted(OUTCOME_MIX_KEYS & set(overrides))
    if objective == CheckpointObjective.OUTCOME:
        if outcome_filters is None:
            raise ValueError("an outcome-supervised model (ORM) needs graded solutions to train on (outcome_filters)")
        if mix:
            raise ValueError(
                f"{', '.join(mix)} weigh outcome labels against human labels in a process run; "
                "an ORM has no human label"
            )
        return
    if outcome_validation_filters is not None:
        raise ValueError("a PRM validates on human labels; outcome validation solutions are for an ORM")
    if mix and outcome_filters is None:
        raise ValueError(f"{', '.join(mix)} given without outcome solutions (outcome_filters) to weigh")


def checkpoint_training_set(*, checkpoint: PRMCheckpoint, selection_pool: bool | None = None) -> TrainingSet:
    """The training set a checkpoint trains (or trained) on, rebuilt from its row.

    The graded selection pool is built when the run chooses its aggregation on it (None:
    as the checkpoint's training options and recipe say) or when ``selection_pool`` is True.
    """
    train = checkpoint.hyperparameters.get("train", {})
    if selection_pool is None:
        selection_pool = chooses_aggregation(base_model=checkpoint.base_model, train_options=train)
    filters = TrainingDataFilters.from_json(checkpoint.hyperparameters.get("data", {}))
    validation = checkpoint.hyperparameters.get("validation_data")
    outcome = checkpoint.hyperparameters.get("outcome_data")
    outcome_validation = checkpoint.hyperparameters.get("outcome_validation_data")
    return training_set_build(
        filters=filters,
        validation_filters=None if validation is None else TrainingDataFilters.from_json(validation),
        neutral=train.get("neutral", "own"),
        val_fraction=train.get("val_fraction", 0.1),
        split_salt=train.get("split_salt", "prm-split"),
        objective=checkpoint.objective,
        outcome_filters=None if outcome is None else OutcomeDataFilters.from_json(outcome),
        outcome_validation_filters=(
            None if outcome_validation is None else OutcomeDataFilters.from_json(outcome_validation)
        ),
        selection_pool=selection_pool,
    )


def chooses_aggregation(*, base_model: str, train_options: Mapping[str, Any]) -> bool:
    """Whether a run on ``base_model`` with these training options chooses its aggregation
    on the validation problems' graded pool (TrainConfig.resolved: the option, else the
    recipe of the device the run is on); a fixed one never reads the pool."""
    fixed = train_options.get("aggregation")
    if fixed is None:
        import torch

        gpu = torch.cuda.is_available() and not train_options.get("cpu", False)
        fixed = recipe_for(base_model, gpu=gpu).aggregation
    return bool(fixed == CHOOSE_AGGREGATION)


def checkpoint_run(
    *,
    checkpoint_id: int,
    training_set: TrainingSet | None = None,
    progress: Progress | None = None,
    on_epoch: EpochCallback | None = None,
) -> PRMCheckpoint:
    """Train (or resume) a checkpoint and record the outcome on its row.

    READY rows are returned untouched; FAILED rows are retried (resuming from their
    output directory). On an exception the row is marked FAILED with the error and the
    exception propagates.
    """
    from activelearn.checkpoints.scoring import feature_cache_configure
    from activelearn.prm.distributed import train
    from activelearn.prm.training import TrainConfig

    checkpoint = PRMCheckpoint.objects.get(pk=checkpoint_id)
    if checkpoint.status == CheckpointStatus.READY:
        return checkpoint
    if checkpoint.status == CheckpointStatus.FAILED and not checkpoint_transition(
        checkpoint_id=checkpoint_id, to=CheckpointStatus.TRAINING
    ):
        checkpoint.refresh_from_db()
        return checkpoint
    PRMCheckpoint.objects.filter(pk=checkpoint_id).update(started_at=timezone.now(), heartbeat_at=timezone.now())
    started = time.monotonic()
    try:
        # The pulse keeps the claim fresh from its own thread through the silent stretches
        # (building the set, loading the backbone, features); progress ticks tell it the
        # run still moves (activelearn.generations.liveness).
        with Pulse(lambda: checkpoint_alive(checkpoint_id=checkpoint_id)) as pulse:
            if training_set is None:
                training_set = checkpoint_training_set(checkpoint=checkpoint)
            if not training_set.train_items:
                raise NoTrainingDataError(_no_data_message(checkpoint.objective))
            options = dict(checkpoint.hyperparameters.get("train", {}))
            options["neutral"] = training_set.neutral
            config = TrainConfig(output_dir=Path(checkpoint.output_dir), backbone=checkpoint.base_model, **options)
            feature_cache_configure()
            # In this process, or one process per GPU this worker sees (their progress
            # comes back through the same callback, their failure as an exception).
            result = train(
                training_set.train_items,
                config,
                validation=training_set.validation_items,
                progress=_heartbeat_progress(checkpoint_id, progress, pulse),
                on_epoch=None if on_epoch is None else (lambda report: on_epoch(asdict(report))),
                run_id=checkpoint.run_id.hex,
                selection_pool=training_set.selection_pool,
            )
    except BaseException as error:
        checkpoint_transition(
            checkpoint_id=checkpoint_id,
            to=CheckpointStatus.FAILED,
            error=f"{type(error).__name__}: {error}"[:10_000],
            duration_s=time.monotonic() - started,
        )
        raise
    losses = result.train_loss_curve
    stride = max(1, len(losses) // LOSS_CURVE_POINTS)
    metrics = {
        "val_loss": result.val_loss,
        "val_accuracy": result.val_accuracy,
        "val_labeled_steps": result.val_labeled_steps,
        # Beside accuracy, what a constant guess of the majority class scores, and AUROC.
        "val_majority_accuracy": result.val_majority_accuracy,
        "val_auroc": result.val_auroc,
        "epochs": result.epochs,
        # Human-labeled solutions; an ORM has none.
        "train_solutions": len(training_set.train),
        "validation_solutions": len(training_set.validation),
        # Graded solutions used as outcome labels (an ORM's data, or a PRM's extra labels).
        "train_outcome_solutions": len(training_set.outcome_train),
        "validation_outcome_solutions": len(training_set.outcome_validation),
        # Labels of the training sequences by who gave them (weight-0 ones left out).
        "train_human_labels": result.human_labels,
        "train_outcome_labels": result.outcome_labels,
        "labeled_steps_seen": result.labeled_steps_seen,
        "optimizer_steps": result.optimizer_steps,
        "resumed_from_step": result.resumed_from_step,
        "train_loss_first": losses[0][1] if losses else None,
        "train_loss_last": losses[-1][1] if losses else None,
        # Every stride-th (step, loss), plus the last: enough to plot, small enough for a row.
        "train_loss_curve": [list(point) for point in losses[::stride]] + ([list(losses[-1])] if losses else []),
    }
    calibration = result.calibration or {}
    checkpoint_transition(
        checkpoint_id=checkpoint_id,
        to=CheckpointStatus.READY,
        path=str(result.final_dir),
        metrics=metrics,
        threshold=calibration.get("threshold"),
        aggregation=calibration.get("aggregation", ""),
        calibration=calibration,
        examples_seen=result.examples_seen,
        # Wall time of this call; a resumed run counts only its own part.
        duration_s=time.monotonic() - started,
        hyperparameters={**checkpoint.hyperparameters, "resolved": result.hyperparameters},
        steps_done=result.optimizer_steps,
        steps_total=max(result.optimizer_steps, checkpoint.steps_total),
    )
    checkpoint.refresh_from_db()
    return checkpoint


def checkpoint_train(
    *,
    base_model: str,
    through_generation: int | None,
    filters: TrainingDataFilters | None = None,
    validation_filters: TrainingDataFilters | None = None,
    config: Mapping[str, Any] | None = None,
    output_root: Path | None = None,
    progress: Progress | None = None,
    on_epoch: EpochCallback | None = None,
    outcome_filters: OutcomeDataFilters | None = None,
    outcome_validation_filters: OutcomeDataFilters | None = None,
) -> PRMCheckpoint:
    """Create a checkpoint row and train it in this process (the command's path).

    Raises NoTrainingDataError before creating a row when no label (for an ORM: no graded
    solution) matches, and SplitSelectionError when the training and validation
    selections share a problem. Outcome options as in ``checkpoint_create``.
    """
    backbone_check(spec=base_model)
    overrides = dict(config or {})
    objective = overrides.get("objective", CheckpointObjective.PROCESS)
    objective_check(
        objective=objective,
        overrides=overrides,
        outcome_filters=outcome_filters,
        outcome_validation_filters=outcome_validation_filters,
    )
    data_filters = TrainingDataFilters.from_json(
        {**(filters or TrainingDataFilters()).to_json(), "through_generation": through_generation}
    )
    try:
        training_set = training_set_build(
            filters=data_filters,
            validation_filters=validation_filters,
            neutral=overrides.get("neutral", "own"),
            val_fraction=overrides.get("val_fraction", 0.1),
            split_salt=overrides.get("split_salt", "prm-split"),
            objective=objective,
            outcome_filters=outcome_filters,
            outcome_validation_filters=outcome_validation_filters,
            selection_pool=chooses_aggregation(base_model=base_model, train_options=overrides),
        )
    except OverlappingSplitsError as error:
        raise SplitSelectionError(str(error)) from None
    if not training_set.train_items:
        matched = training_set.solutions
        raise NoTrainingDataError(
            f"{_no_data_message(objective)} ({matched} matched, all in the validation split)"
            if matched
            else _no_data_message(objective)
        )
    checkpoint = checkpoint_create(
        base_model=base_model,
        through_generation=through_generation,
        filters=data_filters,
        validation_filters=validation_filters,
        config=overrides,
        output_root=output_root,
        outcome_filters=outcome_filters,
        outcome_validation_filters=outcome_validation_filters,
    )
    return checkpoint_run(checkpoint_id=checkpoint.pk, training_set=training_set, progress=progress, on_epoch=on_epoch)


def _no_data_message(objective: str) -> str:
    if objective == CheckpointObjective.OUTCOME:
        return "no graded solutions with steps to train on (check the splits, and grade the solutions first)"
    return "no labeled solutions to train on (check the filters and the generation limit)"


def _heartbeat_progress(checkpoint_id: int, progress: Progress | None, pulse: Pulse) -> Progress:
    last = 0.0

    def callback(step: int, total: int, loss: float) -> None:
        nonlocal last
        pulse.tick()
        now = time.monotonic()
        # Step 0: work before the first optimizer step (a head-only run's features).
        if step == 1 or step == total or now - last >= HEARTBEAT_INTERVAL_S:
            last = now
            if not checkpoint_heartbeat(checkpoint_id=checkpoint_id, steps_done=step, steps_total=total):
                # Raising from the callback stops train_prm; its last checkpoint stays valid.
                raise CheckpointStoppedError(f"checkpoint {checkpoint_id} is no longer training")
        if progress is not None:
            progress(step, total, loss)

    return callback


def backbone_adapt(
    *,
    spec: str,
    filters: TrainingDataFilters,
    config: AdaptConfig,
    output_root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The backbone ``spec`` after continued LM training on the unlabeled text of the
    training selection's problems (every solution with steps; no label is read).

    Cached under ``CHECKPOINT_DIR/adapted/<key>``, the key hashing the spec, the config and
    the solutions' content: a second run on the same text reuses it, new text adapts anew.
    """
    import hashlib
    import json

    from activelearn.prm.adaptation import ADAPTATION_FILE, adapt_backbone
    from activelearn.selection.solutions import solution_texts

    rows = solution_texts(splits=filters.splits or (), problem_ids=filters.problem_ids or ())
    digest = hashlib.sha256(json.dumps([spec, asdict(config), [row[2] for row in rows]]).encode()).hexdigest()
    directory = Path(output_root if output_root is not None else settings.CHECKPOINT_DIR) / "adapted" / digest[:16]
    if not (directory / ADAPTATION_FILE).is_file():
        texts = [(problem, steps) for problem, steps, _ in rows]
        try:
            adapt_backbone(spec, texts, directory, config, progress=progress)
        except ValueError as error:  # what cannot be adapted, or nothing to adapt on
            raise BackboneAdaptationError(str(error)) from error
    return directory
