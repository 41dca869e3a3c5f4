"""Shared plumbing for the import commands: progress bars and clear errors."""

from __future__ import annotations

import sys
from argparse import ArgumentParser
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError
from tqdm import tqdm

from labeling.data.imports import ImportResult, Progress
from labeling.data.prm800k import RecordError


class ImportCommand(BaseCommand):
    unit = "record"

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("files", nargs="+", type=Path, help=".jsonl files (.jsonl.gz also read)")
        parser.add_argument("--dry-run", action="store_true", help="validate everything, write nothing")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
        parser.add_argument(
            "--strict",
            action="store_true",
            help="exit with an error when nothing was imported (an empty input, or only records already present)",
        )

    def run_import(self, service: Callable[..., ImportResult], options: dict[str, Any]) -> None:
        paths: list[Path] = options["files"]
        for path in paths:
            if not path.is_file():
                raise CommandError(f"{path}: no such file")
        bar = tqdm(unit=self.unit, disable=True if options["no_progress"] else None, file=sys.stderr, leave=False)
        progress: Progress = bar.update
        try:
            result = service(paths=paths, dry_run=options["dry_run"], progress=progress)
        except RecordError as exc:
            raise CommandError(f"{exc}\nNothing was written.") from None
        except IntegrityError as exc:
            raise CommandError(f"the database refused the import ({exc}).\nNothing was written.") from None
        finally:
            bar.close()
        if result.nothing_created:
            if options["strict"]:
                raise CommandError(f"{result.summary()}\n(--strict: an import that creates nothing is an error)")
            self.stdout.write(self.style.WARNING(result.summary()))
            return
        self.stdout.write(self.style.SUCCESS(result.summary()))
