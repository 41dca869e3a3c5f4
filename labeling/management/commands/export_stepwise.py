import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from labeling.exports import ExportFilters
from labeling.models import Phase
from labeling.stepwise import Neutral, ParquetUnavailable, stepwise_export


class Command(BaseCommand):
    help = (
        "Export submitted labels in the stepwise-supervision format of TRL's PRMTrainer (prompt, completions, "
        "labels): one row per labeled solution. JSONL by default, Parquet with --parquet (needs pyarrow). The file "
        "is written to a temporary name and renamed when complete, with a manifest (row count, sha256) beside it."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--output", "-o", required=True, help="file path")
        parser.add_argument(
            "--neutral",
            choices=[n.value for n in Neutral],
            default=Neutral.POSITIVE.value,
            help="label for steps rated 0: true (positive), false (negative), or cut the row before it (drop)",
        )
        parser.add_argument("--parquet", action="store_true", help="write Parquet instead of JSONL (needs pyarrow)")
        parser.add_argument("--phase", type=int, choices=[p.value for p in Phase], help="only phase 1 or phase 2")
        parser.add_argument(
            "--generation", type=int, action="append", default=[], help="only this generation (repeatable)"
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
        bar = tqdm(unit="record", disable=options["no_progress"], file=sys.stderr, leave=False)
        try:
            result = stepwise_export(
                output=options["output"],
                filters=filters,
                neutral=Neutral(options["neutral"]),
                parquet=options["parquet"],
                progress=bar.update,
            )
        except ParquetUnavailable as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(f"cannot write {options['output']}: {exc}") from None
        finally:
            bar.close()
        message = f"wrote {result.records} row(s) to {result.path} (sha256 {result.sha256})"
        self.stdout.write(self.style.SUCCESS(message))
