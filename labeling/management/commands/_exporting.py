"""The record filters shared by the export commands."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from labeling.data.exports import ExportFilters
from labeling.models import Phase


def add_filter_arguments(parser: ArgumentParser) -> None:
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


def filters_from_options(options: dict[str, Any]) -> ExportFilters:
    return ExportFilters(
        phase=options["phase"],
        generations=tuple(options["generation"]),
        exclude_quality_control=options["exclude_quality_control"],
        exclude_screening=options["exclude_screening"],
        finished_only=options["finished_only"],
        include_excluded_labelers=options["include_excluded_labelers"],
    )
