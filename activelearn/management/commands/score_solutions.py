import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Max, Min
from tqdm import tqdm

from activelearn.management.commands._checkpoint_arg import ready_checkpoint
from activelearn.solution_scoring import CheckpointNotReadyError, solutions_score_range
from labeling.models import Solution


class Command(BaseCommand):
    help = (
        "Score solutions with a PRM checkpoint (default: the newest ready one) and upsert one SolutionScore "
        "per solution and checkpoint. --first-id/--last-id restrict to an id range."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--checkpoint", type=int, help="checkpoint id (default: newest ready)")
        parser.add_argument("--first-id", type=int, help="first solution id (inclusive)")
        parser.add_argument("--last-id", type=int, help="last solution id (inclusive)")
        parser.add_argument("--batch-size", type=int, default=16)
        parser.add_argument("--reduction", choices=["product", "min"], default="product")
        parser.add_argument("--neutral-as", choices=["positive", "negative"], default="positive")
        parser.add_argument("--chunk", type=int, default=512, help="solutions per progress tick")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        checkpoint = ready_checkpoint(options["checkpoint"])
        bounds = Solution.objects.aggregate(low=Min("id"), high=Max("id"))
        first = options["first_id"] if options["first_id"] is not None else bounds["low"]
        last = options["last_id"] if options["last_id"] is not None else bounds["high"]
        if first is None or last is None or first > last:
            raise CommandError("no solutions to score")
        total = Solution.objects.filter(id__gte=first, id__lte=last, steps__isnull=False).count()
        written = 0
        with tqdm(total=total, unit="solution", disable=options["no_progress"], file=sys.stderr, leave=False) as bar:
            for start in range(first, last + 1, options["chunk"]):
                try:
                    count = solutions_score_range(
                        checkpoint=checkpoint,
                        first_id=start,
                        last_id=min(last, start + options["chunk"] - 1),
                        batch_size=options["batch_size"],
                        reduction=options["reduction"],
                        neutral_as=options["neutral_as"],
                    )
                except CheckpointNotReadyError as error:
                    raise CommandError(str(error)) from None
                written += count
                bar.update(count)
        self.stdout.write(self.style.SUCCESS(f"scored {written} solution(s) with checkpoint {checkpoint.pk}"))
