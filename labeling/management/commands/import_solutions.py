from typing import Any

from labeling.data.imports import solutions_import
from labeling.management.commands._importing import ImportCommand


class Command(ImportCommand):
    help = (
        "Import generator samples from JSONL: one object per line with problem_id (a Problem unique_id), "
        "steps (a list of strings, or text with one step per line), answer (the final answer), model "
        '(the generator\'s name) and optionally alternatives ([{"step": i, "text": ...}]). '
        "Solutions already stored for the same problem and model are skipped."
    )
    unit = "solution"

    def handle(self, *args: Any, **options: Any) -> None:
        self.run_import(solutions_import, options)
