import time

import pytest
from django.core.management import call_command

from activelearn.answer_grading import solutions_grade, solutions_grade_range
from labeling.models import Solution

from .hanging_grader import hangs_on_request
from .label_factories import problem, solution

pytestmark = pytest.mark.django_db


# (reference answer, stored final answer, steps, expected is_correct, expected note)
TABLE = [
    ("14", "14", ["so x = 14"], True, "normalized-match"),
    ("\\frac{1}{2}", "\\dfrac12", ["half"], True, "normalized-match"),
    ("1,000", "1000", ["a thousand"], True, "normalized-match"),
    ("7", "8", ["so it is 8"], False, "different"),
    ("7", None, ["we get", "the answer is $\\boxed{7}$"], True, "normalized-match"),
    ("7", None, [], False, "no final answer"),
    (None, "7", ["so 7"], None, "no reference answer"),
]


def test_it_grades_final_answers_against_the_problem_answer():
    made = []
    for reference, final, steps, _, _ in TABLE:
        made.append(solution(of=problem(answer=reference), steps=steps, final_answer=final))
    assert solutions_grade(solution_ids=[s.pk for s in made], processes=1) == len(TABLE)
    graded = {s.pk: (s.is_correct, s.grading_note) for s in Solution.objects.all()}
    assert [graded[s.pk] for s in made] == [(correct, note) for *_, correct, note in TABLE]


def test_a_hanging_answer_times_out_without_holding_up_the_batch():
    the_problem = problem(answer="7")
    right = solution(of=the_problem, steps=["7"], final_answer="7")
    stuck = solution(of=the_problem, steps=["?"], final_answer="hang")
    wrong = solution(of=the_problem, steps=["9"], final_answer="9")
    started = time.monotonic()
    written = solutions_grade_range(
        first_id=right.pk, last_id=wrong.pk, timeout_s=1.0, processes=1, grader=hangs_on_request
    )
    assert written == 3 and time.monotonic() - started < 40
    outcome = {s.pk: (s.is_correct, s.grading_note) for s in Solution.objects.all()}
    assert outcome == {
        right.pk: (True, "normalized-match"),
        stuck.pk: (False, "timeout"),
        wrong.pk: (False, "different"),
    }


def test_the_grade_command_reports_a_summary(capsys):
    the_problem = problem(answer="7")
    solution(of=the_problem, steps=["7"], final_answer="7")
    solution(of=the_problem, steps=["9"], final_answer="9")
    call_command("grade_solutions", "--no-progress")
    assert "graded 2 solution(s): 1 correct, 1 wrong (0 timed out)" in capsys.readouterr().out
