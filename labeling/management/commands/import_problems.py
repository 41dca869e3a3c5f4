from typing import Any

from labeling.data.imports import problems_import
from labeling.management.commands._importing import ImportCommand


class Command(ImportCommand):
    help = (
        "Import MATH-style problems from JSONL: one object per line with problem, solution, answer, "
        "subject, level and unique_id. Problems whose unique_id exists are skipped."
    )
    unit = "problem"

    def handle(self, *args: Any, **options: Any) -> None:
        self.run_import(problems_import, options)
