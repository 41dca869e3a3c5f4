import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from labeling.data.stepwise import Neutral, ParquetUnavailable, stepwise_export
from labeling.management.commands._exporting import add_filter_arguments, filters_from_options


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
        add_filter_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        filters = filters_from_options(options)
        bar = tqdm(unit="record", disable=True if options["no_progress"] else None, file=sys.stderr, leave=False)
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
