import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from labeling.data.exports import prm800k_export
from labeling.management.commands._exporting import add_filter_arguments, filters_from_options


class Command(BaseCommand):
    help = (
        "Export submitted labels as PRM800K JSONL. Streams from one consistent snapshot; a file target is "
        "written to a temporary file and renamed when complete, with a manifest (record count, sha256) beside it."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--output", "-o", required=True, help="file path ('.gz' compresses), or - for stdout")
        add_filter_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        filters = filters_from_options(options)
        to_stdout = options["output"] == "-"
        # disable=None: no bar unless stderr is a terminal; in a log or a pipe it cannot be
        # erased, and "leave=False" would leave an empty bar after the result line.
        disable = True if options["no_progress"] or to_stdout else None
        bar = tqdm(unit="record", disable=disable, file=sys.stderr, leave=False)
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
