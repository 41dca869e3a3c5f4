from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError
from django.db import transaction

from labeling.data.imports import ImportResult
from labeling.management.commands._importing import ImportCommand
from labeling.models import Generation, Solution
from labeling.quality.gold import GoldError, gold_import, quality_control_set_create, screening_set_create


class Command(ImportCommand):
    help = (
        "Turn labeled PRM800K records into gold: the first step rated -1 is an acceptable first error, "
        "earlier steps must not be negative, a 'solution' record means no error anywhere. The solutions must "
        "already be imported. Optionally add them to the screening set or a generation's QC pool."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        target = parser.add_mutually_exclusive_group()
        target.add_argument("--screening", action="store_true", help="add the solutions to the screening set")
        target.add_argument(
            "--quality-control", type=int, metavar="GENERATION", help="add the solutions to this generation's QC pool"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        screening: bool = options["screening"]
        qc_number: int | None = options["quality_control"]
        generation = None
        if qc_number is not None:
            generation = Generation.objects.filter(number=qc_number).first()
            if generation is None:
                raise CommandError(f"no generation {qc_number}")

        def service(**kwargs: Any) -> ImportResult:
            with transaction.atomic():
                result, solution_ids = gold_import(**kwargs)
                if kwargs["dry_run"] or not (screening or generation):
                    return result
                solutions = [Solution.objects.get(pk=pk) for pk in solution_ids]
                try:
                    if screening:
                        tasks = screening_set_create(solutions=solutions)
                    else:
                        assert generation is not None
                        tasks = quality_control_set_create(generation=generation, solutions=solutions)
                except GoldError as exc:
                    raise CommandError(f"{exc}\nNothing was written.") from None
                result.created["screening tasks" if screening else "QC tasks"] = len(tasks)
                return result

        self.run_import(service, options)
