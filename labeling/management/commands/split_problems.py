"""``manage.py split_problems``: a reproducible train / validation / test split of problems."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from labeling.data.problem_splits import SplitRequestError, problems_split_assign


class Command(BaseCommand):
    help = (
        "Assign problems to the train, validation and test splits (Problem.split) by a seeded hash of their "
        "unique_id: the same seed always gives the same split, and problems added later never move the others. "
        "The PRM commands select work with --split (train_prm, evaluate_prm, score_solutions)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--prefix", help="only problems whose unique_id starts with this (e.g. champ/)")
        parser.add_argument("--problem", action="append", dest="problem_ids", help="this unique_id (repeatable)")
        parser.add_argument("--validation", type=float, default=0.2, help="expected share in validation (0.2)")
        parser.add_argument("--test", type=float, default=0.2, help="expected share in test (0.2)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--dry-run", action="store_true", help="report the split, change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = problems_split_assign(
                seed=options["seed"],
                validation=options["validation"],
                test=options["test"],
                prefix=options["prefix"],
                problem_ids=options["problem_ids"],
                dry_run=options["dry_run"],
            )
        except SplitRequestError as error:
            raise CommandError(str(error)) from None
        counts = ", ".join(f"{count} {split}" for split, count in result.counts.items())
        verb = "would change" if options["dry_run"] else "changed"
        self.stdout.write(self.style.SUCCESS(f"problems: {counts} (seed {options['seed']}; {verb} {result.changed})"))
