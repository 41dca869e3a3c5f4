from typing import Any

from labeling.data.imports import solutions_import
from labeling.management.commands._importing import ImportCommand


class Command(ImportCommand):
    help = (
        "Import generator samples from JSONL: one object per line with problem_id (a Problem unique_id), "
        "steps (a list of strings, or the solution's text, split into steps as the demo and step generation "
        "split them), and optionally answer (the final answer; when absent it is extracted from the steps, "
        "else from summary, a separate one-sentence statement of it), model (the model's name), generator "
        "(what produced the sample: a sampling run, a dataset), source_key (the sample's id there, e.g. a "
        'conversation id) and alternatives ([{"step": i, "text": ...}]). A sample already stored (same problem, '
        "text, answer and model) is skipped; repeats within the input are written once and reported apart; a "
        "source_key that names two different samples is an error."
    )
    unit = "solution"

    def handle(self, *args: Any, **options: Any) -> None:
        self.run_import(solutions_import, options)
