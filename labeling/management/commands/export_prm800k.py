import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from labeling.exports import ExportFilters, prm800k_export
from labeling.models import Phase


class Command(BaseCommand):
    help = (
        "Export submitted labels as PRM800K JSONL. Streams from one consistent snapshot; a file target is "
        "written to a temporary file and renamed when complete, with a manifest (record count, sha256) beside it."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--output", "-o", required=True, help="file path ('.gz' compresses), or - for stdout")
        parser.add_argument("--phase", type=int, choices=[p.value for p in Phase], help="only phase 1 or phase 2")
        parser.add_argument(
            "--generation",
            type=int,
            action="append",
            default=[],
            help="only this generation (repeatable; -1 = screening)",
        )
        parser.add_argument("--exclude-quality-control", action="store_true", help="drop quality-control items")
        parser.add_argument("--exclude-screening", action="store_true", help="drop the screening set")
        parser.add_argument("--finished-only", action="store_true", help="drop bad_problem and give_up records")
        parser.add_argument(
            "--include-excluded-labelers", action="store_true", help="keep labels of labelers marked 'exclude labels'"
        )
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        filters = ExportFilters(
            phase=options["phase"],
            generations=tuple(options["generation"]),
            exclude_quality_control=options["exclude_quality_control"],
            exclude_screening=options["exclude_screening"],
            finished_only=options["finished_only"],
            include_excluded_labelers=options["include_excluded_labelers"],
        )
        to_stdout = options["output"] == "-"
        bar = tqdm(unit="record", disable=options["no_progress"] or to_stdout, file=sys.stderr, leave=False)
        try:
            result = prm800k_export(output=options["output"], filters=filters, progress=bar.update)
        except OSError as exc:
            raise CommandError(f"cannot write {options['output']}: {exc}") from None
        finally:
            bar.close()
        if not to_stdout:
            self.stdout.write(
                self.style.SUCCESS(f"wrote {result.records} record(s) to {result.path} (sha256 {result.sha256})")
            )
