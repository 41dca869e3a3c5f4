"""Final-answer extraction and grading for model-written math solutions.

* ``extract_final_answer``: the answer a solution states (``mathtext.extraction``), or
  None when it states none.
* ``grade_in_process`` / ``grade_answer`` / ``grade_many``: is it the reference answer?
  Formulas are compared as sets of solutions, by string normalisation and then
  symbolically with ``math_verify``; answers in words (yes/no, "there are none", "all
  of them", statements) by what they claim (``comparison``, ``mathtext.claims``,
  ``references``).
  "no answer found" is its own outcome (``GradeResult.answered``), not a wrong answer.
* ``grade_many`` runs items in spawned worker processes and kills one whose item
  overruns its timeout (``workers``).

Nothing this package imports on its own imports Django or torch: Celery workers and the
spawned grading processes import it on their own. sympy is imported only for a symbolic
comparison. ``service`` is its Django side (grading stored solutions); import it by name.
"""

from activelearn.grading.comparison import (
    DEFAULT_TIMEOUT_S,
    DIFFERENT,
    EQUIVALENT,
    ERROR_PREFIX,
    NO_ANSWER,
    NORMALIZED_MATCH,
    SAME_MEANING,
    TIMEOUT,
    Grader,
    GradeResult,
    grade_in_process,
)
from activelearn.grading.normalization import normalize_answer
from activelearn.grading.workers import GradingPool, grade_answer, grade_many
from mathtext.extraction import extract_final_answer

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "DIFFERENT",
    "EQUIVALENT",
    "ERROR_PREFIX",
    "NORMALIZED_MATCH",
    "NO_ANSWER",
    "SAME_MEANING",
    "TIMEOUT",
    "GradeResult",
    "Grader",
    "GradingPool",
    "extract_final_answer",
    "grade_answer",
    "grade_in_process",
    "grade_many",
    "normalize_answer",
]
