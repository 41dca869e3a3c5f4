import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count, Max, Min, Q
from tqdm import tqdm

from activelearn.answer_grading import solutions_grade_range
from activelearn.grading import DEFAULT_TIMEOUT_S
from labeling.models import Solution


class Command(BaseCommand):
    help = (
        "Grade solutions' final answers against their problem's reference answer; writes Solution.is_correct "
        "and grading_note. An answer whose check runs past --timeout is graded incorrect ('timeout')."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--first-id", type=int, help="first solution id (inclusive)")
        parser.add_argument("--last-id", type=int, help="last solution id (inclusive)")
        parser.add_argument("--ungraded-only", action="store_true", help="skip solutions already graded")
        parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per answer")
        parser.add_argument("--chunk", type=int, default=500, help="solutions per progress tick")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["timeout"] <= 0:
            raise CommandError("--timeout must be positive")
        pool = Solution.objects.all()
        if options["ungraded_only"]:
            pool = pool.filter(is_correct__isnull=True)
        bounds = pool.aggregate(low=Min("id"), high=Max("id"))
        first = options["first_id"] if options["first_id"] is not None else bounds["low"]
        last = options["last_id"] if options["last_id"] is not None else bounds["high"]
        if first is None or last is None or first > last:
            raise CommandError("no solutions to grade")
        total = pool.filter(id__gte=first, id__lte=last).count()
        written = 0
        with tqdm(total=total, unit="solution", disable=options["no_progress"], file=sys.stderr, leave=False) as bar:
            for start in range(first, last + 1, options["chunk"]):
                end = min(last, start + options["chunk"] - 1)
                if options["ungraded_only"]:
                    from activelearn.answer_grading import solutions_grade

                    ids = list(pool.filter(id__gte=start, id__lte=end).values_list("id", flat=True))
                    count = solutions_grade(solution_ids=ids, timeout_s=options["timeout"])
                else:
                    count = solutions_grade_range(first_id=start, last_id=end, timeout_s=options["timeout"])
                written += count
                bar.update(count)
        summary = Solution.objects.filter(id__gte=first, id__lte=last).aggregate(
            correct=Count("id", filter=Q(is_correct=True)),
            wrong=Count("id", filter=Q(is_correct=False)),
            timeouts=Count("id", filter=Q(grading_note="timeout")),
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"graded {written} solution(s): {summary['correct']} correct, {summary['wrong']} wrong "
                f"({summary['timeouts']} timed out) in ids {first}..{last}"
            )
        )
