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


# Hard cases from real model output (CHAMP), with how a careful grader rules:
# (the end of a solution, the reference answer, correct?).
HARD_CASES = [
    ("We get the pattern.\nTherefore, a_1964 = -1.", "-1", True),
    ("It has the factor 3.\nTherefore, 1964 is not a prime number.", "No", True),
    ("It has the factor 3.\nTherefore, 1964 is a prime number.", "No", False),
    ("The left side is even.\nTherefore, there is no solution.", "It is not possible", True),
    ("Therefore, for all 1000 values of x_1, x_2, ..., x_1000, we have x_n > 4/5.", "1000 (i.e., all values)", True),
    ("So the inequality holds for 999 of them.", "1000 (i.e., all values)", False),
    ("Therefore, there are 239 such strings of length 6.", "239", True),
    ("Therefore, the number of involutions on the set {1, 2, 3, 4, 5, 6} is T(6) = 76.", "76", True),
    ("So, the expansion of (x+y+z)^1999 will have 2,001,000 terms.", "2001000", True),
    ("So the total is 36*6 + 4*6 = 216 + 24 = 240 ways.", "240", True),
    (
        "The answer is C(n, 4) = n! / (4! * (n - 4)!).",
        "C(n, 4), or an equivalent form such as n(n-1)(n-2)(n-3)/4!",
        True,
    ),
    ("Hence the number of arrangements is (n-1)!/2.", "n!/(2n)", True),
    ("Thus the number of ways is n(n+1)(2n+1)/6 - 1.", "sum_(i=1)^n i^2, or equivalently n(n+1)(2n+1)/6", False),
    (
        "Total number of ways = (n(n+1)/2)^2\nThis is the final answer.",
        "sum_(i=1)^n i^3, or equivalently (n(n+1)/2)^2",
        True,
    ),
    ("Therefore, the only integer solution is x = 0 and y = 0.", "x=y=0", True),
    ("Therefore, the values of a and b are 3 and -4 respectively.", "a=3, b=-4", True),
    ("Therefore, the values of a and b are -4 and 3 respectively.", "a=3, b=-4", False),
    ("So the solutions are (x, y) = (2, 1) and (1, 2).", "(x=1, y=2) and (x=2, y=1)", True),
    (
        "So the solutions are \\( x = a(1 + \\sqrt{2}) \\), \\( x = a(1 - \\sqrt{2}) \\), "
        "\\( x = \\frac{a(1 + \\sqrt{5})}{2} \\) and \\( x = \\frac{a(1 - \\sqrt{5})}{2} \\).",
        "a(1±sqrt(2)), a(1±sqrt(5))/2",
        True,
    ),
    (
        "So the solutions are \\( x = a(1 + \\sqrt{2}) \\) and \\( x = a(1 - \\sqrt{2}) \\).",
        "a(1±sqrt(2)), a(1±sqrt(5))/2",
        False,
    ),
    ("Therefore, the possible functions are: \n1. f(x) = 0 for all x\n2. f(x) = 1 for all x", "f(x)=0 or f(x)=1", True),
    ("Therefore, f(x) = 0 is the only solution.", "f(x)=0 or f(x)=1", False),
    ("So the factorisation is (x + y + z)(x^2 + y^2 + z^2 - xy - yz - zx).", "(x+y+z)(x^2+y^2+z^2-xy-yz-xz)", True),
    ("So $x^4 + x^2 + 1$ is already in its simplest form.", "(x^2+x+1)(x^2-x+1)", False),
    (
        "Therefore, \\( n^5 - 5n^3 + 4n \\equiv 0 \\pmod{120} \\) for any integer n.",
        "0 is the only possible value",
        True,
    ),
    ("Therefore, there are no positive integers a, b, c with that property.", "0 is the only possible value", False),
    ("Therefore, there are no integer solutions to the equation x^2 - 3y^2 = 17.", "No integer solutions", True),
    ("Therefore, x = 6 and y = 5.", "No integer solutions", False),
    ("We conclude that P(x) \\le 0 for all x.", "0 (none of the values)", False),
    ("Since the sum is not an integer, it's impossible to label the edges that way.", "No", True),
    ("So we cannot definitively determine whether it is a prime number.", "No", False),
    ("It's possible that there are no integer solutions.", "No", False),
    ("Therefore, A is not greater than 1/15.", "Yes", False),
    ("Therefore, the limit of the sequence is L = 3.", "The limit exists and is equal to 3", True),
    ("To conclude, the sequence does not have a finite limit.", "The limit does not exist", True),
    (
        "Since a_n/b_n < a_(n+1)/b_(n+1), the sequence a_n/b_n is monotonically increasing.",
        "Monotonically increasing",
        True,
    ),
    ("Therefore, the sequence a_n/b_n is not monotonically increasing.", "Monotonically increasing", False),
    ("So the relationship is that x(n) < y(n-1) for all n ≥ 3.", "x(n)<y(n-1) for all n≥3", True),
    ("So the relationship is that x(n) > y(n-1) for all n ≥ 3.", "x(n)<y(n-1) for all n≥3", False),
    (
        "The final answer is that at most, the polynomial can have 0 integer-valued zeros.",
        "At most 0 integer-valued zeros (i.e., no integer zeros)",
        True,
    ),
    ("Yes, and the sequence is 1/8, 1/64, 1/512, ...", "Yes, and the sequence is 1/2^3, 1/2^6, 1/2^9, ...", True),
    ("Yes, it is possible.", "Yes, and the sequence is 1/2^3, 1/2^6, 1/2^9, ...", False),
    ("Hence the equation has infinite integer solutions.", "Infinitely many solutions", True),
    ("Therefore, there are 98 values of n for which the inequality holds.", "98 values", True),
    ("The answer is $\\boxed{\\frac{5}{14}}$.", "5/14, or approximately 35.7%", True),
    # A condition is not a conclusion; a closing "However, ..." corrects what came before.
    (
        "In conclusion, $n+2$ can be a factor of $s$ if and only if $n$ is odd. "
        "If $n$ is even, $n+2$ cannot be a factor of $s$.",
        "No",
        False,
    ),
    (
        "In general, if $ad$ is odd, then some root is not an integer. "
        "However, it is possible for all three roots to be integers.",
        "No",
        False,
    ),
    (
        "Therefore, all the values from a_5 to a_100 are integers.\n\nIn total, there are 96 such values.",
        "100 (i.e., all values)",
        False,
    ),
    (
        "In conclusion, the possible values of x_12 are 0 and any positive integer less than 100.",
        "0 is the only possible value",
        False,
    ),
    ("So, the answer depends on whether the sums are finite. If they are, then yes; if not, then no.", "No", False),
    ("Therefore, the possible values are 1, 4, and 9.", "1, 4 and 9", True),
]


@pytest.mark.parametrize(("solution", "reference", "correct"), HARD_CASES)
def test_it_grades_real_model_conclusions_as_a_careful_grader_would(solution, reference, correct):
    result = grade_in_process(solution, reference)
    assert result.correct is correct, result
    assert result.answered


@pytest.mark.parametrize(
    "solution",
    [
        "",
        "We try a few cases.\nLet us check the pattern.",
        "These examples demonstrate the application of the given concept.",
        "**",
    ],
)
def test_no_answer_found_is_its_own_outcome(solution):
    assert extract_final_answer(solution) is None
    result = grade_in_process(solution, "7")
    assert result == GradeResult(False, "no answer found") and not result.answered


def test_the_summary_turn_is_read_only_when_the_solution_states_no_answer():
    assert extract_final_answer("We try.\nWe check.", summary="There are 29 valid strings.") == "29"
    assert extract_final_answer("Therefore, there are 30 strings.", summary="There are 29 valid strings.") == "30"


@pytest.mark.parametrize(
    "text",
    ["-1", "No", "It is not possible", "x = 0, y = 0", "1964 is not a prime number", "\\frac{1}{2}", "2,001,000"],
)
def test_an_extracted_answer_extracts_to_itself(text):
    # Stored answers are extracted again when graded.
    assert extract_final_answer(text) == text
