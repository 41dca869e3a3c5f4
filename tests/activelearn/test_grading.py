import time

import pytest

from activelearn.grading import (
    GradeResult,
    extract_final_answer,
    grade_answer,
    grade_in_process,
    grade_many,
    normalize_answer,
)

# (given, reference, equal?)
PAIRS = [
    ("40,\\!000", "40000", True),
    ("320,000", "320000", True),
    ("\\frac{1}{2}", "0.5", True),
    ("\\dfrac{1}{2}", "\\frac12", True),
    ("\\tfrac{3}{4}", "0.75", True),
    ("\\sqrt{2}/2", "\\frac{\\sqrt2}{2}", True),
    ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}", True),
    ("(1,2)", "(1, 2)", True),
    ("(1,2)", "(2,1)", False),
    ("[1,2)", "[1,2]", False),
    ("(-\\infty, 3]", "(-\\infty,3]", True),
    ("(-\\infty,3)\\cup(4,\\infty)", "(-\\infty, 3) \\cup (4, \\infty)", True),
    ("x=3", "3", True),
    ("x = -2", "-2", True),
    ("5\\%", "5", True),
    ("12.5\\%", "12.5", True),
    ("90^\\circ", "90", True),
    ("90^{\\circ}", "90", True),
    ("45 degrees", "45", True),
    ("\\text{(B)}", "B", True),
    ("(C)", "\\text{(C)}", True),
    ("\\text{(A)}", "B", False),
    ("\\text{Monday}", "Monday", True),
    ("\\text{Tuesday}", "\\text{Monday}", False),
    ("\\$18.90", "18.90", True),
    ("18.9", "\\$18.90", True),
    ("10\\text{ cm}", "10", True),
    ("4 \\text{ inches}", "4", True),
    ("5.", "5", True),
    ("2x+1", "1+2x", True),
    ("x^2+2x+1", "(x+1)^2", True),
    ("\\frac{\\pi}{2}", "\\pi/2", True),
    ("2\\sqrt{2}", "\\sqrt{8}", True),
    ("3", "4", False),
    ("\\frac{1}{3}", "0.33", False),
    ("-1", "1", False),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", True),
    ("1,000,000", "10^6", True),
    ("0.5", ".5", True),
    ("\\infty", "-\\infty", False),
    ("3x", "3", False),
    ("\\frac{5}{2} \\text{ meters}", "2.5", True),
]


@pytest.mark.parametrize(("given", "reference", "equal"), PAIRS)
def test_it_grades_tricky_math_answer_pairs(given, reference, equal):
    assert grade_in_process(given, reference).correct is equal


def test_it_grades_the_whole_table_in_worker_processes():
    results = grade_many([(g, r) for g, r, _ in PAIRS], timeout_s=20, processes=2)
    assert [r.correct for r in results] == [equal for _, _, equal in PAIRS]


@pytest.mark.parametrize(
    ("solution", "answer"),
    [
        ("So the total is $\\boxed{\\frac{a}{b}}$.", "\\frac{a}{b}"),
        ("First \\boxed{1}, finally \\boxed{\\{1, \\{2\\}\\}}", "\\{1, \\{2\\}\\}"),
        ("x\\boxed{\\frac{\\sqrt{2}}{2}} done", "\\frac{\\sqrt{2}}{2}"),
        ("The area is 12.\n\n# Answer\n\n320,000", "320,000"),
        ("Step one.\nThe answer is 17.", "17"),
        ("The answer is 9", "9"),
        ("\\boxed 7", "7"),
        ("", None),
    ],
)
def test_it_extracts_final_answers(solution, answer):
    assert extract_final_answer(solution) == answer


def test_it_normalises_without_symbolic_help():
    assert normalize_answer("$40,\\!000$") == "40000"
    assert normalize_answer("\\text{\\textbf{Monday}}") == "Monday"
    assert normalize_answer("y = \\dfrac{3}{4}.") == "\\frac{3}{4}"


def test_it_grades_whole_solutions_against_references():
    solution = "We multiply.\n\n# Answer\n\n320,000"
    assert grade_answer(solution, "The answer is $\\boxed{320000}$.")
    assert not grade_answer(solution, "\\boxed{32000}")
    assert grade_answer("\\boxed{\\frac{1}{2}}", "0.5", timeout_s=30)


def sleepy_grader(given: str, reference: str) -> GradeResult:
    """Stands in for a pathological symbolic comparison (spawned workers import it by name)."""
    if given == "hang":
        time.sleep(120)
    return grade_in_process(given, reference)


def test_it_cuts_off_a_hanging_item_without_losing_the_batch():
    pairs = [("1", "1"), ("hang", "1"), ("\\frac{1}{2}", "0.5"), ("2", "3"), ("x=4", "4")]
    started = time.monotonic()
    results = grade_many(pairs, timeout_s=1.5, processes=2, grader=sleepy_grader)
    assert time.monotonic() - started < 60
    assert results[1] == GradeResult(False, "timeout")
    assert [r.correct for r in results] == [True, False, True, False, True]
