import sys
from argparse import ArgumentParser
from typing import Any, cast

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from activelearn.checkpoints.runs import checkpoint_aggregation
from activelearn.checkpoints.scoring import (
    CheckpointNotReadyError,
    Reduction,
    checkpoint_model_load,
    scoring_pool,
    solutions_score,
)
from activelearn.management.commands._checkpoint_arg import ready_checkpoint
from activelearn.models import PRMCheckpoint
from activelearn.prm.scoring import REDUCTIONS


def pool_without_unscored_filter_exists(options: dict[str, Any], checkpoint: PRMCheckpoint) -> bool:
    return scoring_pool(
        checkpoint=checkpoint,
        splits=options["splits"],
        problem_ids=options["problem_ids"],
        generation=options["generation"],
    ).exists()


class Command(BaseCommand):
    help = (
        "Score solutions with a PRM checkpoint (default: the newest ready one) and upsert one SolutionScore "
        "per solution and checkpoint (step scores, and the solution score under the checkpoint's chosen "
        "aggregation unless --reduction is given). Select the work by what it is: --split, --problem, "
        "--generation (its tasks), --unscored (not yet scored by this checkpoint), or an id range. The model "
        "is loaded once per run."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--checkpoint", type=int, help="checkpoint id (default: newest ready)")
        parser.add_argument("--split", action="append", dest="splits", help="problems of this split (repeatable)")
        parser.add_argument("--problem", action="append", dest="problem_ids", help="this Problem.unique_id")
        parser.add_argument("--generation", type=int, help="solutions served as tasks of this generation")
        parser.add_argument("--unscored", action="store_true", help="only solutions this checkpoint has not scored")
        parser.add_argument("--first-id", type=int, help="first solution id (inclusive)")
        parser.add_argument("--last-id", type=int, help="last solution id (inclusive)")
        parser.add_argument("--batch-size", type=int, default=16)
        parser.add_argument("--reduction", choices=REDUCTIONS, help="default: the checkpoint's chosen aggregation")
        parser.add_argument("--neutral-as", choices=["positive", "negative"], default="positive")
        parser.add_argument("--chunk", type=int, default=512, help="solutions per progress tick")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        checkpoint = ready_checkpoint(options["checkpoint"])
        pool = scoring_pool(
            checkpoint=checkpoint,
            splits=options["splits"],
            problem_ids=options["problem_ids"],
            generation=options["generation"],
            unscored=options["unscored"],
        )
        if options["first_id"] is not None:
            pool = pool.filter(id__gte=options["first_id"])
        if options["last_id"] is not None:
            pool = pool.filter(id__lte=options["last_id"])
        # The ids are read up front: with --unscored, scoring shrinks the selection as it goes.
        ids = list(pool.order_by("id").values_list("id", flat=True))
        if not ids:
            if options["unscored"] and pool_without_unscored_filter_exists(options, checkpoint):
                self.stdout.write(self.style.SUCCESS(f"nothing left to score with checkpoint {checkpoint.pk}"))
                return
            raise CommandError("no solutions to score (check the selection)")
        reduction = cast(Reduction, options["reduction"] or checkpoint_aggregation(checkpoint=checkpoint))
        try:
            checkpoint_model_load(checkpoint=checkpoint)
        except CheckpointNotReadyError as error:
            raise CommandError(str(error)) from None
        written = 0
        with tqdm(total=len(ids), unit="solution", disable=options["no_progress"], file=sys.stderr, leave=False) as bar:
            for start in range(0, len(ids), options["chunk"]):
                count = solutions_score(
                    checkpoint=checkpoint,
                    solution_ids=ids[start : start + options["chunk"]],
                    batch_size=options["batch_size"],
                    reduction=reduction,
                    neutral_as=options["neutral_as"],
                )
                written += count
                bar.update(count)
        self.stdout.write(
            self.style.SUCCESS(
                f"scored {written} solution(s) with checkpoint {checkpoint.pk} (aggregation {reduction})"
            )
        )
