from typing import Any

from labeling.data.release_import import prm800k_import
from labeling.management.commands._importing import ImportCommand


class Command(ImportCommand):
    help = (
        "Import PRM800K release files (.jsonl or .jsonl.gz), phase 1 and phase 2, creating problems, "
        "solutions, labelers, generations, tasks, assignments and ratings. All files are validated "
        "before anything is written, and everything is written in one transaction."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        self.run_import(prm800k_import, options)
