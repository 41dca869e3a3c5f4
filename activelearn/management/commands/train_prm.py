import math
import sys
from argparse import ArgumentParser
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from activelearn.checkpoints.runs import (
    STEP_FEATURE_NAMES,
    BackboneAdaptationError,
    BackboneMissingError,
    NoTrainingDataError,
    SplitSelectionError,
    backbone_adapt,
    checkpoint_run,
    checkpoint_train,
)
from activelearn.checkpoints.training_data import OutcomeDataFilters, OutcomeSelectionError, TrainingDataFilters
from activelearn.management.commands._options import adapt_config, fmt
from activelearn.models import CheckpointObjective, CheckpointStatus, PRMCheckpoint
from activelearn.prm.recipes import AGGREGATIONS

# AdaptConfig fields --adapt-steps and its company set (the rest keep their defaults).
ADAPT_OPTIONS = {
    "max_steps": "adapt_steps",
    "learning_rate": "adapt_learning_rate",
    "train_layers": "adapt_train_layers",
}


class Command(BaseCommand):
    help = (
        "Train a process reward model on the submitted labels (quality control, screening, unfinished "
        "tasks and excluded/suspended labelers left out unless asked) and record it as a PRMCheckpoint. "
        "--resume CHECKPOINT_ID continues a checkpoint that was interrupted or failed. --split/--problem pick the "
        "problems trained on and --validation-split the ones validated on (default: a hash of the problem id "
        "holds out --val-fraction). Options left out take the backbone family's defaults (docs/prm.md). Every "
        "epoch prints validation accuracy beside the majority-class baseline and step AUROC; the end prints the "
        "first-error threshold and solution aggregation chosen on validation. --objective outcome trains an "
        "outcome-supervised model (ORM) on the graded solutions of --split instead, no human label read; "
        "--outcome-weight/--outcome-targets/--outcome-solutions add graded solutions to a PRM's human labels."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backbone", default=None, help=f"backbone spec (default {settings.PRM_BACKBONE})")
        parser.add_argument("--through-generation", type=int, help="use labels up to this generation (and phase 1)")
        parser.add_argument(
            "--split", action="append", dest="splits", help="train on problems of this split (repeatable)"
        )
        parser.add_argument("--problem", action="append", dest="problem_ids", help="train on this Problem.unique_id")
        parser.add_argument(
            "--validation-split", action="append", dest="validation_splits", help="validate on this split (repeatable)"
        )
        parser.add_argument("--resume", type=int, metavar="CHECKPOINT_ID", help="resume this checkpoint instead")
        parser.add_argument("--neutral", choices=["own", "positive", "negative"], default="own")
        parser.add_argument("--epochs", type=int, help="num_epochs (default: the backbone family's)")
        parser.add_argument("--max-steps", type=int)
        parser.add_argument("--learning-rate", type=float)
        parser.add_argument("--batch-size", type=int)
        parser.add_argument("--gradient-accumulation-steps", type=int)
        parser.add_argument("--max-length", type=int)
        parser.add_argument("--freeze-layers", type=int, help="lower transformer layers kept frozen")
        parser.add_argument(
            "--step-features",
            nargs="*",
            choices=sorted(STEP_FEATURE_NAMES),
            help="what the head reads beside the hidden state (none given: none; default: the backbone family's)",
        )
        parser.add_argument(
            "--backbone-layers",
            type=int,
            help="keep the backbone's lowest N layers, the head reading the last (default: the backbone family's)",
        )
        parser.add_argument(
            "--head-l2",
            type=float,
            nargs="*",
            help="head only: fit the head at these L2 strengths, keep the best on validation (none given: AdamW for "
            "--epochs; default: the backbone family's)",
        )
        parser.add_argument(
            "--aggregation",
            choices=AGGREGATIONS,
            help="how step scores become a solution score: choose (on the validation problems' graded pool) or a "
            "fixed one (default: the backbone family's; docs/prm.md)",
        )
        parser.add_argument(
            "--threshold-decay",
            type=float,
            help="how far the first-error threshold falls along a solution, in standard deviations of the "
            "validation steps' logits per log(1 + step index); 0: flat (default: the backbone family's)",
        )
        parser.add_argument("--class-weighting", choices=["balanced", "none"], help="loss weights per class")
        parser.add_argument("--val-fraction", type=float)
        parser.add_argument("--seed", type=int)
        parser.add_argument("--checkpoint-every", type=int, help="optimizer steps between resumable checkpoints")
        parser.add_argument(
            "--adapter",
            choices=["auto", "full", "lora"],
            help="full fine-tune or LoRA; auto (the default): full when the memory estimate fits the GPU, else "
            "LoRA, else refused with the numbers",
        )
        parser.add_argument("--lora-rank", type=int, help="rank of the LoRA adapters (default 16)")
        parser.add_argument(
            "--processes",
            type=int,
            help="training processes, one per GPU (default: every GPU visible; several shard a full fine-tune "
            "with FSDP)",
        )
        parser.add_argument("--include-quality-control", action="store_true")
        parser.add_argument("--include-screening", action="store_true")
        parser.add_argument("--include-unfinished", action="store_true", help="keep bad_problem / give_up labels")
        parser.add_argument("--include-excluded-labelers", action="store_true")
        parser.add_argument("--include-suspended-labelers", action="store_true")
        parser.add_argument(
            "--adapt-steps",
            type=int,
            default=0,
            help="first continue the backbone's LM training this many steps on the training problems' unlabeled "
            "solutions (adapt_backbone; cached by content)",
        )
        parser.add_argument("--adapt-learning-rate", type=float, help="continued LM training's rate")
        parser.add_argument("--adapt-train-layers", type=int, help="top blocks the LM training moves; 0: all")
        parser.add_argument(
            "--objective",
            choices=CheckpointObjective.values,
            default=CheckpointObjective.PROCESS,
            help="process: a PRM on human step labels; outcome: an ORM on the grader's final-answer verdicts of "
            "the graded solutions of --split/--problem (validated on those of --validation-split), scored at the "
            "final step",
        )
        parser.add_argument(
            "--outcome-solutions",
            type=int,
            help="graded solutions drawn uniformly (seeded) as outcome labels (default: all that match)",
        )
        parser.add_argument("--outcome-seed", type=int, default=0, help="seed of that draw")
        parser.add_argument(
            "--outcome-weight",
            type=float,
            help="process run: add graded solutions as outcome labels, each weighing this much against a human "
            "step label (default 1)",
        )
        parser.add_argument(
            "--outcome-targets",
            choices=["final", "every_step"],
            help="process run: label an outcome solution's final step (default) or every step with its verdict",
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        bar = tqdm(unit="step", disable=options["no_progress"], file=sys.stderr, leave=False)

        def progress(step: int, total: int, loss: float) -> None:
            bar.total = total
            bar.n = step
            bar.set_postfix(loss="features" if math.isnan(loss) else f"{loss:.4f}", refresh=False)
            bar.refresh()

        def epoch(report: dict[str, Any]) -> None:
            bar.clear()
            self.stdout.write(_epoch_line(report))

        try:
            if options["resume"] is not None:
                if not PRMCheckpoint.objects.filter(pk=options["resume"]).exists():
                    raise CommandError(f"no checkpoint with id {options['resume']}")
                checkpoint = checkpoint_run(checkpoint_id=options["resume"], progress=progress, on_epoch=epoch)
            else:
                config = {
                    key: options[option]
                    for key, option in (
                        ("num_epochs", "epochs"),
                        ("max_steps", "max_steps"),
                        ("learning_rate", "learning_rate"),
                        ("batch_size", "batch_size"),
                        ("gradient_accumulation_steps", "gradient_accumulation_steps"),
                        ("max_length", "max_length"),
                        ("freeze_layers", "freeze_layers"),
                        ("step_features", "step_features"),
                        ("backbone_layers", "backbone_layers"),
                        ("head_l2", "head_l2"),
                        ("aggregation", "aggregation"),
                        ("threshold_decay", "threshold_decay"),
                        ("class_weighting", "class_weighting"),
                        ("val_fraction", "val_fraction"),
                        ("seed", "seed"),
                        ("checkpoint_every", "checkpoint_every"),
                        ("adapter", "adapter"),
                        ("lora_rank", "lora_rank"),
                        ("processes", "processes"),
                    )
                    if options[option] is not None
                }
                config["neutral"] = options["neutral"]
                outcome, outcome_validation = _outcome_selection(options, config)
                filters = TrainingDataFilters(
                    include_quality_control=options["include_quality_control"],
                    include_screening=options["include_screening"],
                    include_unfinished=options["include_unfinished"],
                    include_excluded_labelers=options["include_excluded_labelers"],
                    include_suspended_labelers=options["include_suspended_labelers"],
                    splits=tuple(options["splits"]) if options["splits"] else None,
                    problem_ids=tuple(options["problem_ids"]) if options["problem_ids"] else None,
                )
                validation = (
                    replace(filters, splits=tuple(options["validation_splits"]), problem_ids=None)
                    if options["validation_splits"]
                    else None
                )
                base_model = options["backbone"] or settings.PRM_BACKBONE
                if options["adapt_steps"]:
                    base_model = str(
                        backbone_adapt(
                            spec=base_model,
                            filters=filters,
                            config=adapt_config(options, ADAPT_OPTIONS),
                            progress=self.stderr.write,
                        )
                    )
                    self.stdout.write(f"training on the adapted backbone {base_model}")
                checkpoint = checkpoint_train(
                    base_model=base_model,
                    through_generation=options["through_generation"],
                    filters=filters,
                    validation_filters=validation,
                    config=config,
                    progress=progress,
                    on_epoch=epoch,
                    outcome_filters=outcome,
                    outcome_validation_filters=outcome_validation,
                )
        except (
            NoTrainingDataError,
            BackboneMissingError,
            SplitSelectionError,
            BackboneAdaptationError,
            OutcomeSelectionError,
        ) as error:
            raise CommandError(str(error)) from None
        except Exception as error:
            raise CommandError(f"training failed: {type(error).__name__}: {error}") from error
        finally:
            bar.close()
        if checkpoint.status != CheckpointStatus.READY:
            raise CommandError(f"checkpoint {checkpoint.pk} is {checkpoint.status}: {checkpoint.error}")
        metrics = checkpoint.metrics
        if checkpoint.objective == CheckpointObjective.OUTCOME:
            self.stdout.write(
                self.style.SUCCESS(
                    f"ORM checkpoint {checkpoint.pk} ready at {checkpoint.path}: "
                    f"{metrics.get('train_outcome_solutions')} train / {metrics.get('validation_outcome_solutions')} "
                    f"validation graded solutions, {metrics.get('optimizer_steps')} steps, val loss "
                    f"{fmt(metrics.get('val_loss'))}, val AUROC of the final-step score against answer correctness "
                    f"{fmt(metrics.get('val_auroc'))} (chance 0.5); solutions are scored by their last step; "
                    f"{checkpoint.duration_s or 0:.1f}s"
                )
            )
            return
        calibration = checkpoint.calibration or {}
        chosen = (
            f"first-error threshold {fmt(checkpoint.threshold)} (validation F1 "
            f"{fmt((calibration.get('first_error') or {}).get('f1'))}"
            + (
                f"; falling by {fmt(calibration['threshold_decay'])} logits per log(1 + step)"
                if calibration.get("threshold_decay")
                else ""
            )
            + f"), aggregation {checkpoint.aggregation}"
            if checkpoint.threshold is not None
            else "no validation solutions: threshold 0.5 and aggregation min by default"
        )
        outcome_labels = (
            f" and {metrics.get('train_outcome_labels')} outcome labels from {metrics.get('train_outcome_solutions')} "
            "graded solutions"
            if metrics.get("train_outcome_solutions")
            else ""
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"checkpoint {checkpoint.pk} ready at {checkpoint.path}: {metrics.get('train_solutions')} train / "
                f"{metrics.get('validation_solutions')} validation solutions{outcome_labels}, "
                f"{checkpoint.examples_seen} examples "
                f"seen, {metrics.get('optimizer_steps')} steps, val loss {fmt(metrics.get('val_loss'))}, "
                f"val accuracy {fmt(metrics.get('val_accuracy'))} (majority class "
                f"{fmt(metrics.get('val_majority_accuracy'))}), val step AUROC {fmt(metrics.get('val_auroc'))} "
                f"(chance 0.5); {chosen}; {checkpoint.duration_s or 0:.1f}s"
            )
        )


def _outcome_selection(
    options: dict[str, Any], config: dict[str, Any]
) -> tuple[OutcomeDataFilters | None, OutcomeDataFilters | None]:
    """The graded solutions to train (and, for an ORM, validate) on; sets the outcome
    options in ``config``. Outcome labels come from the problems trained on (--split,
    --problem); an ORM validates on the graded solutions of --validation-split."""
    mixing = [
        flag
        for flag, name in (("--outcome-weight", "outcome_weight"), ("--outcome-targets", "outcome_targets"))
        if options[name] is not None
    ]
    if options["objective"] == CheckpointObjective.OUTCOME:
        if mixing:
            raise OutcomeSelectionError(
                f"{', '.join(mixing)}: for a process run; an ORM trains on outcome labels alone"
            )
        config["objective"] = CheckpointObjective.OUTCOME
    elif not mixing and options["outcome_solutions"] is None:
        return None, None
    if not options["splits"] and not options["problem_ids"]:
        raise OutcomeSelectionError(
            "outcome labels need --split or --problem to come from (so that held-out problems are never read)"
        )
    outcome = OutcomeDataFilters(
        splits=tuple(options["splits"]) if options["splits"] else None,
        problem_ids=tuple(options["problem_ids"]) if options["problem_ids"] else None,
        count=options["outcome_solutions"],
        seed=options["outcome_seed"],
    )
    if options["objective"] == CheckpointObjective.OUTCOME:
        validation = (
            OutcomeDataFilters(splits=tuple(options["validation_splits"])) if options["validation_splits"] else None
        )
        return outcome, validation
    for key, name in (("outcome_weight", "outcome_weight"), ("outcome_targets", "outcome_targets")):
        if options[name] is not None:
            config[key] = options[name]
    return outcome, None


def _epoch_line(report: dict[str, Any]) -> str:
    return (
        f"epoch {report['epoch']} (step {report['step']}): train loss {fmt(report['train_loss'])}, "
        f"val loss {fmt(report['val_loss'])}, val accuracy {fmt(report['val_accuracy'])} "
        f"(majority class {fmt(report['val_majority_accuracy'])}), val step AUROC {fmt(report['val_auroc'])} "
        f"(chance 0.5) on {report['val_labeled_steps']} labeled steps"
        + (
            ""
            if report.get("head_l2") is None
            else f"; head L2 {report['head_l2']:g}, chosen on val step AUROC "
            + ", ".join(f"{k}: {fmt(v)}" for k, v in (report.get("head_l2_val_aurocs") or {}).items())
        )
    )
