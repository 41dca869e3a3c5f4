"""A grader for the grading-service tests. Its own module, free of Django imports,
because the spawned grading workers import it by name without setting Django up."""

from __future__ import annotations

import time

from activelearn.grading import GradeResult, grade_in_process


def hangs_on_request(given: str, reference: str) -> GradeResult:
    """Stands in for sympy hanging on a pathological answer."""
    if given == "hang":
        time.sleep(60)
    return grade_in_process(given, reference)
