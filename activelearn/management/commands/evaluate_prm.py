import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from activelearn.checkpoint_evaluation import DEFAULT_BEST_OF_N, checkpoint_evaluate
from activelearn.management.commands._checkpoint_arg import ready_checkpoint


class Command(BaseCommand):
    help = (
        "Evaluate a PRM checkpoint (default: the newest ready one) on held-out data: step AUROC, "
        "ProcessBench-style first-error accuracy/F1, best-of-N vs majority vote. Stored in "
        "PRMCheckpoint.evaluation and printed as JSON. Score and grade the held-out pool first for best-of-N."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--checkpoint", type=int, help="checkpoint id (default: newest ready)")
        parser.add_argument(
            "--generation", type=int, help="evaluate on this generation's labels (default: the validation split)"
        )
        parser.add_argument("--n", type=int, action="append", help=f"best-of-N sizes (default {DEFAULT_BEST_OF_N})")
        parser.add_argument("--trials", type=int, default=10, help="random subsets per problem and N")
        parser.add_argument("--threshold", type=float, default=0.5, help="P(fine) below this is an error")
        parser.add_argument("--batch-size", type=int, default=16)

    def handle(self, *args: Any, **options: Any) -> None:
        checkpoint = ready_checkpoint(options["checkpoint"])
        result = checkpoint_evaluate(
            checkpoint=checkpoint,
            generation=options["generation"],
            best_of_n_sizes=tuple(options["n"] or DEFAULT_BEST_OF_N),
            trials=options["trials"],
            threshold=options["threshold"],
            batch_size=options["batch_size"],
        )
        self.stdout.write(json.dumps(result, indent=2))
        self.stderr.write(
            self.style.SUCCESS(
                f"evaluated checkpoint {checkpoint.pk} on {result['labeled_solutions']} held-out labeled solution(s)"
            )
        )
