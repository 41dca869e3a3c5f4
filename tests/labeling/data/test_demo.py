"""load_demo: CHAMP problems and real LLM solutions as generation-0 work, demo logins, idempotence."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from labeling.data import demo
from labeling.data.demo import demo_load, extract_final_answer, split_steps
from labeling.models import (
    Generation,
    GenerationStatus,
    Labeler,
    LabelerStatus,
    Phase,
    Problem,
    Solution,
    Split,
    Task,
    TaskKind,
    TaskStatus,
    content_sha256,
    text_sha256,
)

PER_PROBLEM = 2  # keeps each load well under a second
_READ_CHAMP = demo.read_champ
_champ_cache: dict[int | None, list[demo.DemoProblem]] = {}


@pytest.fixture(autouse=True)
def _read_champ_once(monkeypatch):
    # Parsing the 70 MB dataset is most of a load's time; the tests only need it once per size.
    def cached(*, solutions_per_problem):
        if solutions_per_problem not in _champ_cache:
            _champ_cache[solutions_per_problem] = _READ_CHAMP(solutions_per_problem=solutions_per_problem)
        return _champ_cache[solutions_per_problem]

    monkeypatch.setattr(demo, "read_champ", cached)


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    # The demo sets two passwords per load; PBKDF2 would dominate the runtime.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _counts() -> tuple[int, int, int, int, int, int]:
    return (
        Problem.objects.count(),
        Solution.objects.count(),
        Generation.objects.count(),
        Task.objects.count(),
        get_user_model().objects.count(),
        Labeler.objects.count(),
    )


# --- splitting and final answers (no database) --------------------------------


def test_one_step_per_non_empty_line():
    assert split_steps("First.\n\n  Second.  \n\nThird.\n") == ["First.", "Second.", "Third."]


def test_display_math_spanning_lines_stays_in_one_step():
    text = "We compute:\n\\[\n1 + 1\n= 2\n\\]\nSo the answer is $\\boxed{2}$."
    assert split_steps(text) == ["We compute:", "\\[\n1 + 1\n= 2\n\\]", "So the answer is $\\boxed{2}$."]


def test_dollar_environment_and_code_blocks_stay_whole():
    text = "$$\na = b\n$$\n\\begin{align*}\nx &= 1 \\\\\ny &= 2\n\\end{align*}\n```\ncode\n```\nDone."
    assert split_steps(text) == [
        "$$\na = b\n$$",
        "\\begin{align*}\nx &= 1 \\\\\ny &= 2\n\\end{align*}",
        "```\ncode\n```",
        "Done.",
    ]


def test_single_line_display_math_is_its_own_step():
    assert split_steps("Thus\n\\[ x = 1 \\]\nDone.") == ["Thus", "\\[ x = 1 \\]", "Done."]


def test_unclosed_block_does_not_swallow_the_rest():
    # A reply cut off inside a display block keeps one step per line.
    assert split_steps("Start.\n\\[\nx = 1\nand more") == ["Start.", "\\[", "x = 1", "and more"]


def test_step_wise_header_of_few_shot_replies_is_dropped():
    assert split_steps("Step-wise solution:\n1. a\n2. b") == ["1. a", "2. b"]


def test_final_answer_is_last_boxed_with_nested_braces():
    steps = ["First $\\boxed{1}$.", "So the answer is $\\boxed{\\frac{1}{2}}$."]
    assert extract_final_answer(steps) == "\\frac{1}{2}"


def test_final_answer_falls_back_to_last_line():
    assert extract_final_answer(["a", "Thus the answer is 239."]) == "Thus the answer is 239."
    assert extract_final_answer(["Cut off \\boxed{12"]) == "Cut off \\boxed{12"
    assert extract_final_answer([]) is None


def test_task_priority_is_stable_and_in_unit_interval():
    first = demo.task_priority("champ/P_Combinatorics_1", "GPT-4|0-Shot")
    assert first == demo.task_priority("champ/P_Combinatorics_1", "GPT-4|0-Shot")
    assert 0 <= first < 1
    assert first != demo.task_priority("champ/P_Combinatorics_1", "GPT-4|5-Shot")


# --- loading -------------------------------------------------------------------


@pytest.mark.django_db
def test_load_demo_creates_real_problems_solutions_tasks_and_logins():
    result = demo_load(solutions_per_problem=PER_PROBLEM, admin_password="adm-pw", labeler_password="lab-pw")

    problems = list(Problem.objects.all())
    assert len(problems) == 270 == result.problems_total == result.problems_created
    for problem in problems:
        assert problem.unique_id.startswith("champ/P_")
        assert problem.answer
        assert problem.solution
        assert problem.subject
        assert problem.split == Split.TEST
        assert problem.problem_sha256 == text_sha256(problem.problem)

    solutions = list(Solution.objects.all())
    assert len(solutions) == 270 * PER_PROBLEM == result.solutions_created
    assert {s.source_model for s in solutions} <= {"GPT-3.5", "GPT-4", "GPT-4 Turbo", "PaLM 2 Medium"}
    for solution in solutions:
        assert solution.steps and all(step.strip() == step and step for step in solution.steps)
        assert solution.content_sha256 == content_sha256(solution.steps, solution.final_answer)
        assert solution.final_answer
        assert solution.is_correct is None
    assert sum(1 for s in solutions if s.step_count > 1) > 0.9 * len(solutions)

    generation = Generation.objects.get()
    assert (generation.number, generation.phase, generation.status) == (0, Phase.TWO, GenerationStatus.OPEN)
    tasks = list(Task.objects.all())
    assert len(tasks) == len(solutions) == result.tasks_created
    assert {t.solution_id for t in tasks} == {s.pk for s in solutions}
    for task in tasks:
        assert task.generation_id == generation.pk
        assert (task.kind, task.status, task.serial, task.labelers_needed) == (
            TaskKind.NORMAL,
            TaskStatus.OPEN,
            0,
            1,
        )
        assert not task.is_quality_control
        assert 0 <= task.priority < 1

    admin = get_user_model().objects.get(username="admin")
    assert admin.is_staff and admin.is_superuser
    labeler_user = get_user_model().objects.get(username="labeler")
    assert not labeler_user.is_staff
    assert labeler_user.labeler.status == LabelerStatus.ACTIVE
    assert Client().login(username="admin", password="adm-pw")
    assert Client().login(username="labeler", password="lab-pw")


@pytest.mark.django_db
def test_second_run_creates_nothing():
    demo_load(solutions_per_problem=PER_PROBLEM, admin_password="a", labeler_password="l")
    before = _counts()
    again = demo_load(solutions_per_problem=PER_PROBLEM, admin_password="a", labeler_password="l")
    assert _counts() == before
    assert (again.problems_created, again.solutions_created, again.tasks_created) == (0, 0, 0)
    assert not again.admin.created and not again.labeler.created
    assert again.admin.password_works and again.labeler.password_works


@pytest.mark.django_db
def test_zero_solutions_loads_problems_only():
    result = demo_load(solutions_per_problem=0, admin_password="a", labeler_password="l")
    assert result.problems_total == 270
    assert Solution.objects.count() == Task.objects.count() == 0


# --- the command ----------------------------------------------------------------


@pytest.mark.django_db
def test_command_prints_credentials_every_run(monkeypatch):
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", "s3cret-admin")
    monkeypatch.setenv("DEMO_LABELER_PASSWORD", "s3cret-labeler")
    for _ in range(2):
        out = StringIO()
        call_command("load_demo", "--solutions-per-problem", str(PER_PROBLEM), stdout=out)
        text = out.getvalue()
        assert "username: admin" in text and "password: s3cret-admin" in text
        assert "username: labeler" in text and "password: s3cret-labeler" in text
    assert "this run created 0 problems, 0 solutions, 0 tasks" in text
    assert Client().login(username="labeler", password="s3cret-labeler")


@pytest.mark.django_db
def test_existing_password_is_kept_unless_reset(monkeypatch):
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", "first")
    monkeypatch.setenv("DEMO_LABELER_PASSWORD", "first-l")
    call_command("load_demo", "--solutions-per-problem", "0", stdout=StringIO())
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", "second")
    out = StringIO()
    call_command("load_demo", "--solutions-per-problem", "0", stdout=out)
    assert "use --reset-passwords" in out.getvalue()
    assert Client().login(username="admin", password="first")
    call_command("load_demo", "--solutions-per-problem", "0", "--reset-passwords", stdout=StringIO())
    assert Client().login(username="admin", password="second")


@pytest.mark.django_db
def test_command_rejects_negative_size():
    with pytest.raises(CommandError, match="0 or more"):
        call_command("load_demo", "--solutions-per-problem", "-1", stdout=StringIO())


@pytest.mark.django_db
def test_command_refuses_default_passwords_outside_a_local_setup(monkeypatch):
    monkeypatch.delenv("DEMO_ADMIN_PASSWORD", raising=False)
    monkeypatch.delenv("DEMO_LABELER_PASSWORD", raising=False)
    monkeypatch.setattr("labeling.management.commands.load_demo.default_passwords_allowed", lambda *, debug: False)
    with pytest.raises(CommandError, match="DEMO_ADMIN_PASSWORD"):
        call_command("load_demo", stdout=StringIO())
    assert Problem.objects.count() == 0


@pytest.mark.django_db
def test_generation_zero_of_another_phase_is_an_error_and_nothing_is_written(monkeypatch):
    Generation.objects.create(number=0, phase=Phase.ONE)
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", "a")
    monkeypatch.setenv("DEMO_LABELER_PASSWORD", "l")
    with pytest.raises(CommandError, match="not a phase-2 generation"):
        call_command("load_demo", "--solutions-per-problem", "1", stdout=StringIO())
    assert Problem.objects.count() == Solution.objects.count() == Task.objects.count() == 0
    assert not get_user_model().objects.exists()
