import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from activelearn.grading import DEFAULT_TIMEOUT_S
from activelearn.grading.service import grade_summary, solutions_grade
from activelearn.selection.solutions import never_graded_q, solutions_matching
from labeling.models import Generation, Solution, Split


class Command(BaseCommand):
    help = (
        "Grade solutions' final answers against their problem's reference answer; writes Solution.is_correct "
        "and grading_note. Select solutions by --split, --problem, --generation and --first-id/--last-id "
        "(all of them when none is given); --ungraded skips solutions graded before. An answer whose check runs "
        "past --timeout is graded incorrect ('timeout'); a solution that states no answer is 'no answer found' "
        "(is_correct stays empty), counted apart from wrong ones."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--split",
            action="append",
            dest="splits",
            default=[],
            choices=[split for split in Split.values if split],
            help="only problems of this split (repeatable)",
        )
        parser.add_argument(
            "--problem",
            action="append",
            dest="problem_ids",
            default=[],
            metavar="UNIQUE_ID",
            help="only this problem (repeatable; a trailing * matches a prefix, e.g. 'champ/*')",
        )
        parser.add_argument(
            "--generation",
            action="append",
            dest="generations",
            type=int,
            default=[],
            metavar="N",
            help="only solutions served as tasks in generation N (repeatable)",
        )
        parser.add_argument("--first-id", type=int, help="first solution id (inclusive)")
        parser.add_argument("--last-id", type=int, help="last solution id (inclusive)")
        parser.add_argument("--ungraded", "--ungraded-only", action="store_true", help="skip solutions graded before")
        parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per answer")
        parser.add_argument("--processes", type=int, help="grading worker processes (default: up to 4)")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["timeout"] <= 0:
            raise CommandError("--timeout must be positive")
        if options["processes"] is not None and options["processes"] < 1:
            raise CommandError("--processes must be at least 1")
        unknown = set(options["generations"]) - set(
            Generation.objects.filter(number__in=options["generations"]).values_list("number", flat=True)
        )
        if unknown:
            raise CommandError(f"no generation numbered {', '.join(str(n) for n in sorted(unknown))}")
        selection = solutions_matching(
            splits=options["splits"],
            problem_ids=options["problem_ids"],
            generations=options["generations"],
            first_id=options["first_id"],
            last_id=options["last_id"],
        )
        to_grade = selection.filter(never_graded_q()) if options["ungraded"] else selection
        ids = list(to_grade.order_by("id").values_list("id", flat=True))
        if not ids and not selection.exists():
            raise CommandError("no solutions match the selection")
        with tqdm(total=len(ids), unit="solution", disable=options["no_progress"], file=sys.stderr, leave=False) as bar:
            written = solutions_grade(
                solution_ids=ids, timeout_s=options["timeout"], processes=options["processes"], progress=bar.update
            )
        # The summary covers the whole selection, so a --ungraded run also shows what was graded before.
        summary = grade_summary(Solution.objects.filter(id__in=selection.values("id")))
        self.stdout.write(self.style.SUCCESS(f"graded {written} solution(s); the selection now: {summary}"))
