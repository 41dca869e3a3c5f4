import json
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from activelearn.generations.config import PipelineError
from activelearn.generations.pipeline import generation_start


class Command(BaseCommand):
    help = (
        "Start the next active-learning generation: retrain the PRM (unless --no-retrain), score the pool, "
        "grade final answers, select convincing wrong-answer solutions and open them as tasks. The work "
        "runs on the Celery workers; this only records the request and enqueues the first step. "
        "Options not given keep their defaults (docs/active-learning.md)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--number", type=int, help="generation number (default: one past the highest)")
        parser.add_argument("--config", type=Path, help="a JSON file of GenerationConfig options; flags override it")
        parser.add_argument("--k", type=int, help="solutions to select, in total or per problem (default 100)")
        parser.add_argument("--per-problem", action="store_true", default=None, help="K per problem, not in total")
        parser.add_argument("--wrong-share", type=float, help="share of convincing wrong-answer picks (0.8)")
        parser.add_argument("--problem", action="append", dest="problem_ids", help="Problem.unique_id (repeatable)")
        parser.add_argument("--split", choices=["train", "validation", "test", ""], help="only problems of this split")
        parser.add_argument("--per-problem-cap", type=int, help="at most N pool solutions per problem")
        parser.add_argument("--qc-items", type=int, help="gold QC items to add to the generation (0)")
        parser.add_argument("--overlap-share", type=float, help="share of tasks labeled twice")
        parser.add_argument("--neutral", choices=["own", "positive", "negative"], help="training: neutral labels")
        parser.add_argument("--neutral-as", choices=["positive", "negative"], help="scoring: neutral counts as")
        parser.add_argument(
            "--reduction",
            choices=["product", "min", "mean", "last"],
            help="step scores to a solution score (default: the checkpoint's aggregation)",
        )
        parser.add_argument("--no-retrain", action="store_false", dest="retrain", default=None)
        parser.add_argument("--checkpoint", type=int, dest="checkpoint_id", help="with --no-retrain: this checkpoint")
        parser.add_argument("--base-model", help="backbone spec to train from (default PRM_BACKBONE)")
        parser.add_argument("--through-generation", type=int, help="train on labels up to this generation")
        parser.add_argument(
            "--train-option", action="append", default=[], metavar="KEY=VALUE", help="TrainConfig override (JSON value)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        values: dict[str, Any] = {}
        if options["config"] is not None:
            try:
                values = json.loads(options["config"].read_text())
            except (OSError, ValueError) as error:
                raise CommandError(f"{options['config']}: {error}") from None
        keys = (
            "k", "per_problem", "wrong_share", "problem_ids", "split", "per_problem_cap", "qc_items", "overlap_share",
            "neutral", "neutral_as", "reduction", "retrain", "checkpoint_id", "base_model", "through_generation",
        )  # fmt: skip
        values.update({key: options[key] for key in keys if options[key] is not None})
        training = dict(values.get("training", {}))
        for item in options["train_option"]:
            key, sep, raw = item.partition("=")
            if not sep:
                raise CommandError(f"--train-option {item!r}: expected KEY=VALUE")
            try:
                training[key] = json.loads(raw)
            except ValueError:
                training[key] = raw
        if training:
            values["training"] = training
        try:
            generation = generation_start(number=options["number"], config=values)
        except PipelineError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"{generation} requested; follow it in the admin or with GenerationRun {generation.run.pk}")
