"""Grading on layouts the grader was not first tuned on, from real model solutions (CHAMP).

Three classes of solution (see ``benchmarks/grading_champ.py``, ``layout``):

* **remark ending**: the last step is a remark or a closing delimiter, and the answer is
  stated a step before it;
* **yes/no reference**: the answer is a statement ("A is greater than 1/15") whose yes or
  no is read, not a number pulled out of it;
* **quantified reference**: "at most two of the numbers can be greater than 1" claims a
  bounded count, compared with "Exactly one" as a count, not the value 1.

``data/champ_layout_verdicts.jsonl`` holds 20 solutions of each class drawn with seed 38
(``python benchmarks/grading_champ.py --no-annotated --no-pool --draw-layouts 20 --seed 38``),
drawn whatever the grader ruled, each read by hand: ``verdict`` is whether the
solution's final answer is right, ``reason`` says why in a line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from activelearn.grading import extract_final_answer, grade_in_process
from benchmarks import grading_champ

TABLE = Path(__file__).parents[1] / "data" / "champ_layout_verdicts.jsonl"
SEED = 38
PER_CLASS = 20

# (the end of a real CHAMP solution, its reference answer, right by a careful grader?)
REMARK_ENDINGS = [
    (  # P_Number-Theory_3, GPT-4 Turbo, 5-shot
        "Now, let's summarize our findings. The three-digit automorphic numbers are:\n- 376\n- 625\n"
        "These are the three-digit automorphic numbers where the square of the number ends with the number itself.",
        "376 and 625",
        True,
    ),
    (  # P_Combinatorics_19, GPT-4 Turbo, direct concept without hint
        "Applying these identities, we get:\n\\[ \\sum_{k=1}^{n} C(n, k) k^2 = n(n-1) 2^{n-2} + n 2^{n-1}. \\]\n"
        "This is the closed-form formula for the sum. Note that we have to subtract the \\( k=0 \\) terms from the "
        "identities since our original sum starts from \\( k=1 \\). However, \\( C(n, 0) k \\) and "
        "\\( C(n, 0) k (k-1) \\) are both zero when \\( k=0 \\), so the formula remains the same.",
        "n(n+1)*2^(n-2)",
        True,
    ),
    (  # P_Polynomial_20, GPT-4 Turbo, a third of the solution given
        "Therefore, our assumption that f(x) is not the zero polynomial must be incorrect. The only polynomial that "
        "satisfies the given functional equation for all x is the zero polynomial:\nf(x) = 0\n"
        "This is the polynomial that satisfies the condition x * f(x - 1) = (x + 1) * f(x) for all x.",
        "f(x)=0",
        True,
    ),
    (  # P_Combinatorics_10, GPT-3.5, named concept with hint
        "In general, the number of sequences of positive integer numbers that have a sum of n is given by:\n"
        "(2n-2)! / ((n-1)! * (n-1)!)\n"
        "This formula can be used to calculate the number of sequences for any positive integer value of n.",
        "2^(n-1)",
        False,
    ),
    (  # P_Combinatorics_10, GPT-4 Turbo, named concept with hint: a display closed on its own line
        "So, the final answer, expressed as a function of \\( n \\), is:\n\\[\n2^{n-1}\n\\]",
        "2^(n-1)",
        True,
    ),
]

YES_NO_STATEMENTS = [
    ("Therefore, A is greater than 1/15.", "Yes", True),  # P_Inequality_28, GPT-3.5, 0-shot
    ("Therefore, A is not greater than 1/15.", "Yes", False),
    ("Therefore, the cubed sum $a^3 + b^3 + c^3$ is always divisible by 6.", "Yes", True),  # P_Number-Theory_49
    ("Therefore, $a^3+b^3+c^3$ is also divisible by 6.", "Yes", True),  # P_Number-Theory_49, PaLM 2
    (  # P_Number-Theory_49, GPT-3.5, direct concept without hint
        "So, the cubed sum of three integers a, b, and c is not always divisible by 6.",
        "Yes",
        False,
    ),
    (  # P_Combinatorics_24, PaLM 2, 5-shot
        "However, this means that all of the labels of the edges leaving a vertex are equal, which is not possible.",
        "No",
        True,
    ),
    (  # P_Number-Theory_45, GPT-3.5, named concept without hint
        "Therefore, x = 10^1962 + 1 is not a prime number.",
        "No",
        True,
    ),
    ("Therefore, $x$ is divisible by 1961.", "No", False),  # P_Number-Theory_45, PaLM 2: no yes or no in it
    (  # P_Sequence_45, GPT-4 Turbo, direct concept with hint: an inequality as a formula is a claim too
        "Since the cube root of 27000 is indeed greater than 30, we can conclude that \\( a_{9000} > 30 \\).",
        "Yes",
        True,
    ),
    ("Therefore, $x_n \\neq 0$ for all $n$.", "Yes", True),  # P_Sequence_37
    (  # P_Sequence_45, GPT-4 Turbo, 5-shot: a hedge claims nothing
        "We would need to use a more precise method to estimate the growth of the sequence or compute more terms "
        "directly to determine the value of a_9000.",
        "Yes",
        False,
    ),
]

QUANTIFIED = [
    (  # P_Inequality_44, GPT-4 Turbo, 0-shot
        "From the above analysis, we can conclude that at most two of the numbers can be greater than 1.",
        "Exactly one",
        False,
    ),
    (  # P_Inequality_44, GPT-4 Turbo, 5-shot
        'Hence, the answer to the question "How many of them can be greater than 1?" is one.',
        "Exactly one",
        True,
    ),
    ("12. Therefore, only one of the three numbers can be greater than 1.", "Exactly one", True),  # GPT-3.5
    ("Therefore, the answer is that at least one of the three numbers can be greater than 1.", "Exactly one", False),
    ("7. So none of them can be greater than 1.", "Exactly one", False),  # P_Inequality_44, GPT-4, 5-shot
    (  # P_Number-Theory_10, GPT-3.5, 0-shot
        "So, the answer is that at least one of the three numbers must be divisible by 5.",
        "At least 1 number",
        True,
    ),
    (  # P_Number-Theory_10, GPT-4 Turbo: the equation named at the end is not the answer
        "In conclusion, at least one of the three numbers \\(x\\), \\(y\\), or \\(z\\) must be divisible by 5 in any "
        "integer-valued solution to the equation \\(x^2 + y^2 = z^2\\).",
        "At least 1 number",
        True,
    ),
    ("Therefore, at least two of the three numbers must be divisible by 5.", "At least 1 number", False),
    (  # P_Polynomial_3, GPT-4, root concept without hint
        "Therefore, the polynomial can have at most one integer-valued zero, which is 0.",
        "At most 0 integer-valued zeros (i.e., no integer zeros)",
        False,
    ),
    (
        "The final answer is that at most, the polynomial can have 0 integer-valued zeros.",
        "At most 0 integer-valued zeros (i.e., no integer zeros)",
        True,
    ),
    (  # P_Sequence_44, GPT-4 Turbo, no concept with hint
        "In conclusion, there is only one sequence of positive numbers a_0, a_1, a_2, ... that satisfies the given "
        "conditions, which is the trivial sequence where t = 0.",
        "Exactly one sequence",
        True,
    ),
    (  # P_Sequence_44: infinitely many is not one
        "Therefore, there are infinitely many sequences of positive numbers a_0, a_1, a_2, ... that satisfy the given "
        "conditions.",
        "Exactly one sequence",
        False,
    ),
]


@pytest.mark.parametrize(("solution", "reference", "correct"), REMARK_ENDINGS)
def test_it_looks_back_past_closing_remarks_to_the_step_that_states_the_answer(solution, reference, correct):
    result = grade_in_process(solution, reference)
    assert result.correct is correct, (extract_final_answer(solution), result)
    assert result.answered


@pytest.mark.parametrize(("solution", "reference", "correct"), YES_NO_STATEMENTS)
def test_it_reads_yes_or_no_from_a_statement_not_a_number_out_of_it(solution, reference, correct):
    result = grade_in_process(solution, reference)
    assert result.correct is correct, (extract_final_answer(solution), result)
    assert result.answered


@pytest.mark.parametrize(("solution", "reference", "correct"), QUANTIFIED)
def test_it_compares_bounded_counts_with_quantified_references(solution, reference, correct):
    result = grade_in_process(solution, reference)
    assert result.correct is correct, (extract_final_answer(solution), result)
    assert result.answered


def test_a_comparison_is_not_the_value_it_compares_with():
    assert extract_final_answer("Therefore, A is greater than 1/15.") == "A is greater than 1/15"
    assert not grade_in_process("Therefore, A is greater than 1/15.", "1/15").correct
    assert extract_final_answer("Hence, the number of such values is at most two.") == "at most 2"


def test_a_cut_off_display_is_no_answer_rather_than_its_delimiter():
    # P_Inequality_43, PaLM 2: the reply stops after opening a display.
    assert extract_final_answer("Since $ab-ac-bc \\ge 0$ and $2a+2b+2c > 0$, we have\n$$") is None


@pytest.mark.parametrize(
    "text",
    [
        "at most 2",
        "A is greater than 1/15",
        "at least one of the three numbers must be divisible by 5",
        "all of the labels of the edges leaving a vertex are equal, which is not possible",
    ],
)
def test_the_new_answers_extract_to_themselves(text):
    assert extract_final_answer(text) == text


# ------------------------------------------------------------------------ the hand table


def rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in TABLE.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def pool() -> list[grading_champ.Sample]:
    return grading_champ.read_pool()


def test_the_layout_table_is_the_seeded_draw_and_every_row_is_checked_by_hand(pool):
    drawn = grading_champ.layout_draw(pool, PER_CLASS, SEED)
    expected = [(f"{name}, seed {SEED}", pool[i].problem_id, pool[i].conversation) for name, i in drawn]
    assert [(r["sample"], r["problem_id"], r["conversation"]) for r in rows()] == expected
    assert len(expected) == PER_CLASS * len(grading_champ.LAYOUTS)
    assert all(row["verdict"] in ("correct", "wrong") and row["reason"] for row in rows())


def test_the_grader_agrees_with_every_hand_verdict_on_the_layout_table(pool):
    where = {(s.problem_id, s.conversation): s for s in pool}
    disagreements = []
    graded_correct = right = truly_correct = 0
    for row in rows():
        sample = where[(row["problem_id"], row["conversation"])]
        answer = extract_final_answer(sample.text, summary=sample.summary)
        correct = grade_in_process(answer or "", row["reference"]).correct
        truly_correct += row["verdict"] == "correct"
        if correct:
            graded_correct += 1
            right += row["verdict"] == "correct"
        if correct != (row["verdict"] == "correct"):
            disagreements.append((row["problem_id"], row["conversation"], answer, row["verdict"]))
    assert not disagreements
    assert right / graded_correct >= 0.98  # precision
    assert right / truly_correct >= 0.95  # recall
