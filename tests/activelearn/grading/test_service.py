import time

import pytest
from django.core.management import call_command

from activelearn.grading.service import solutions_grade, solutions_grade_range
from labeling.models import Solution
from tests.activelearn.label_factories import problem, solution

from .hanging_grader import hangs_on_request

pytestmark = pytest.mark.django_db


# (reference answer, stored final answer, steps, expected is_correct, expected note)
TABLE = [
    ("14", "14", ["so x = 14"], True, "normalized-match"),
    ("\\frac{1}{2}", "\\dfrac12", ["half"], True, "normalized-match"),
    ("1,000", "1000", ["a thousand"], True, "normalized-match"),
    ("7", "8", ["so it is 8"], False, "different"),
    ("7", None, ["we get", "the answer is $\\boxed{7}$"], True, "normalized-match"),
    ("7", None, [], None, "no answer found"),
    ("7", None, ["We try a few cases.", "Let us check."], None, "no answer found"),
    ("-1", None, ["Then a_{n+1} = -a_n.", "Therefore, a_1964 = -1."], True, "normalized-match"),
    ("No", None, ["It has a factor 3.", "Therefore, 1964 is not a prime number."], True, "same meaning"),
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


def test_the_grade_command_reports_no_answer_found_apart_from_wrong_answers(capsys):
    the_problem = problem(answer="7")
    solution(of=the_problem, steps=["7"], final_answer="7")
    solution(of=the_problem, steps=["9"], final_answer="9")
    solution(of=the_problem, steps=["We try a few cases.", "Let us check."])
    call_command("grade_solutions", "--no-progress", "--processes", "1")
    assert (
        "graded 3 solution(s); the selection now: 1 correct, 1 wrong (0 timed out, 0 errors), "
        "1 no answer found, 0 without a reference answer, 0 not graded"
    ) in capsys.readouterr().out


def _graded_ids() -> set[int]:
    return set(Solution.objects.exclude(grading_note="").values_list("id", flat=True))


def test_the_grade_command_selects_work_by_split_problem_and_generation(capsys):
    from labeling.models import Split, Task
    from tests.activelearn.label_factories import generation

    train = problem(unique_id="champ/P_Train_1")
    train.split = Split.TRAIN
    train.save(update_fields=["split"])
    test = problem(unique_id="champ/P_Test_1")
    test.split = Split.TEST
    test.save(update_fields=["split"])
    other = problem(unique_id="other/1")
    in_train = solution(of=train, steps=["7"], final_answer="7")
    in_test = solution(of=test, steps=["7"], final_answer="7")
    in_other = solution(of=other, steps=["7"], final_answer="7")
    served = solution(of=other, steps=["8"], final_answer="8")
    Task.objects.create(generation=generation(3), solution=served)

    call_command("grade_solutions", "--no-progress", "--processes", "1", "--split", "train")
    assert _graded_ids() == {in_train.pk}
    call_command("grade_solutions", "--no-progress", "--processes", "1", "--problem", "champ/*")
    assert _graded_ids() == {in_train.pk, in_test.pk}
    call_command("grade_solutions", "--no-progress", "--processes", "1", "--generation", "3")
    assert _graded_ids() == {in_train.pk, in_test.pk, served.pk}
    assert "graded 1 solution(s); the selection now: 0 correct, 1 wrong" in capsys.readouterr().out
    call_command(
        "grade_solutions",
        "--no-progress",
        "--processes",
        "1",
        "--problem",
        "other/1",
        "--first-id",
        str(in_other.pk),
        "--last-id",
        str(in_other.pk),
    )
    assert _graded_ids() == {in_train.pk, in_test.pk, served.pk, in_other.pk}


def test_ungraded_skips_everything_graded_before_including_no_answer_found(capsys):
    the_problem = problem(answer="7")
    graded = solution(of=the_problem, steps=["9"], final_answer="9")
    silent = solution(of=the_problem, steps=["We try a few cases.", "Let us check."])
    Solution.objects.filter(pk=graded.pk).update(is_correct=True, grading_note="a note a run left")
    Solution.objects.filter(pk=silent.pk).update(grading_note="no answer found")
    fresh = solution(of=the_problem, steps=["7"], final_answer="7")

    call_command("grade_solutions", "--no-progress", "--processes", "1", "--ungraded")

    out = capsys.readouterr().out
    assert "graded 1 solution(s); the selection now: 2 correct, 0 wrong" in out
    assert "1 no answer found" in out
    assert Solution.objects.get(pk=graded.pk).grading_note == "a note a run left"
    assert Solution.objects.get(pk=fresh.pk).is_correct is True


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--generation", "41"], "no generation numbered 41"),
        (["--problem", "nothing/here"], "no solutions match the selection"),
        (["--timeout", "0"], "--timeout must be positive"),
    ],
)
def test_the_grade_command_names_what_it_cannot_select(arguments, message):
    from django.core.management.base import CommandError

    solution(of=problem(answer="7"), steps=["7"], final_answer="7")
    with pytest.raises(CommandError, match=message):
        call_command("grade_solutions", "--no-progress", *arguments)
