import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from activelearn.checkpoints.evaluation import DEFAULT_BEST_OF_N, EvaluationRequestError, checkpoint_evaluate
from activelearn.checkpoints.scoring import CheckpointNotReadyError
from activelearn.management.commands._checkpoint_arg import ready_checkpoint
from activelearn.prm.evaluation import DEFAULT_DRAWS, DEFAULT_RESAMPLES


class Command(BaseCommand):
    help = (
        "Evaluate a PRM checkpoint (default: the newest ready one) on held-out data: step AUROC, "
        "ProcessBench-style first-error accuracy/F1 beside 'always no error' and 'random at the prior', and "
        "best-of-N over the held-out problems' unlabeled pool (PRM with each aggregation, weighted vote, "
        "majority vote, random, oracle: expected accuracies over every size-N subset; problems used and "
        "skipped per N), each with a 95% bootstrap interval. Held out: --split/--problem, "
        "--generation, or by default the checkpoint's validation set. The threshold is the checkpoint's "
        "(chosen on validation) unless --threshold is given. Stored in PRMCheckpoint.evaluation under the "
        "held-out set's key and printed as JSON; score and grade the pool first (score_solutions, "
        "grade_solutions)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--checkpoint", type=int, help="checkpoint id (default: newest ready)")
        parser.add_argument("--split", action="append", dest="splits", help="problems of this split (repeatable)")
        parser.add_argument("--problem", action="append", dest="problem_ids", help="this Problem.unique_id")
        parser.add_argument("--generation", type=int, help="evaluate on this generation's labels")
        parser.add_argument("--n", type=int, action="append", help=f"best-of-N sizes (default {DEFAULT_BEST_OF_N})")
        parser.add_argument(
            "--draws",
            "--trials",
            type=int,
            dest="draws",
            help=f"random subsets per problem and N for majority and weighted vote (default {DEFAULT_DRAWS}; "
            "every subset where there are fewer); the PRM, random and oracle are exact",
        )
        parser.add_argument(
            "--resamples",
            type=int,
            help=f"bootstrap resamples behind each 95%% interval (default {DEFAULT_RESAMPLES})",
        )
        parser.add_argument(
            "--threshold", type=float, help="P(fine) below this is an error (default: the checkpoint's)"
        )
        parser.add_argument("--batch-size", type=int, default=16)

    def handle(self, *args: Any, **options: Any) -> None:
        checkpoint = ready_checkpoint(options["checkpoint"])
        if options["threshold"] is not None and not 0.0 <= options["threshold"] <= 1.0:
            raise CommandError("--threshold must lie in [0, 1]")
        for name in ("draws", "resamples"):
            if options[name] is not None and options[name] < 1:
                raise CommandError(f"--{name} must be at least 1, got {options[name]}")
        try:
            result = checkpoint_evaluate(
                checkpoint=checkpoint,
                generation=options["generation"],
                splits=options["splits"],
                problem_ids=options["problem_ids"],
                best_of_n_sizes=tuple(options["n"] or DEFAULT_BEST_OF_N),
                draws=options["draws"],
                resamples=options["resamples"],
                threshold=options["threshold"],
                batch_size=options["batch_size"],
            )
        except (EvaluationRequestError, CheckpointNotReadyError) as error:
            raise CommandError(str(error)) from None
        self.stdout.write(json.dumps(result, indent=2))
        if result["held_out_problems_in_training"]:
            self.stderr.write(
                self.style.WARNING(
                    f"{result['held_out_problems_in_training']} of {result['held_out_problems']} held-out problems "
                    "were trained on: these are not held-out numbers"
                )
            )
        if result["step_metrics_note"]:
            self.stderr.write(
                self.style.WARNING(f"step AUROC and first error of an ORM: {result['step_metrics_note']}")
            )
        skipped = {n: row["skipped"] for n, row in result["best_of_n"].items() if row["skipped"]}
        if skipped:
            self.stderr.write(
                self.style.WARNING(
                    "best-of-N skipped problems with fewer than N pool solutions: "
                    + ", ".join(f"N={n}: {count}" for n, count in skipped.items())
                )
            )
        self.stderr.write(
            self.style.SUCCESS(
                f"evaluated checkpoint {checkpoint.pk} on {result['labeled_solutions']} held-out labeled solution(s) "
                f"({result['held_out']})"
            )
        )
