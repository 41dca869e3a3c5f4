"""load_demo: CHAMP problems, every distinct real LLM solution, human labels as gold and labeled work, logins."""

from __future__ import annotations

from collections import Counter
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from labeling.data import demo
from labeling.data.demo import GENERATOR, demo_load
from labeling.models import (
    Assignment,
    AssignmentStatus,
    FinishReason,
    Generation,
    GenerationStatus,
    Labeler,
    LabelerStatus,
    Phase,
    Problem,
    Solution,
    Split,
    StepRating,
    Task,
    TaskKind,
    TaskStatus,
    content_sha256,
    text_sha256,
)
from mathtext.splitting import split_steps
from tests.champ_cache import read_champ_once

PER_PROBLEM = 2  # keeps each load well under a second


@pytest.fixture(autouse=True)
def _read_champ_once(monkeypatch):
    monkeypatch.setattr(demo, "read_champ", read_champ_once)


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


# --- reading CHAMP (no database) ---------------------------------------------


def test_the_demo_stores_the_answer_a_solution_states_not_its_last_sentence():
    # CHAMP P_Combinatorics_1, GPT-3.5 with the concept and hints: its last line is
    # "Therefore, there are 239 such strings of length 6."
    problem = next(p for p in demo.read_champ(solutions_per_problem=None) if p.unique_id == "champ/P_Combinatorics_1")
    solution = next(s for s in problem.solutions if s.conversation == "GPT-3.5|Direct C w/ H")
    assert solution.steps[-1] == "Therefore, there are 239 such strings of length 6."
    assert solution.final_answer == "239"
    assert solution.summary and solution.summary.startswith("There are 239 strings")


def test_a_read_of_the_first_problems_is_the_start_of_the_whole_read():
    from tests.champ_cache import _READ_CHAMP

    assert _READ_CHAMP(solutions_per_problem=None, limit_problems=3) == read_champ_once(solutions_per_problem=None)[:3]
    with pytest.raises(demo.DemoError, match="the number of problems to read must be 1 or more, got 0"):
        _READ_CHAMP(solutions_per_problem=None, limit_problems=0)


def test_solutions_are_split_by_the_shared_splitter():
    import champ_dataset

    problem = demo.read_champ(solutions_per_problem=1)[0]
    solution = problem.solutions[0]  # the first conversation; annotated ones follow
    item = champ_dataset.load(demo.CHAMP_VERSION).problems[problem.unique_id.removeprefix("champ/")]
    found = demo.solution_message(item.conversations[solution.conversation].messages)
    assert found is not None
    assert solution.steps == split_steps(found[0].text)


def test_task_priority_is_stable_and_in_unit_interval():
    first = demo.task_priority("champ/P_Combinatorics_1", "GPT-4|0-Shot")
    assert first == demo.task_priority("champ/P_Combinatorics_1", "GPT-4|0-Shot")
    assert 0 <= first < 1
    assert first != demo.task_priority("champ/P_Combinatorics_1", "GPT-4|5-Shot")


# --- loading -------------------------------------------------------------------


PROBLEMS = 40  # 80 human annotations: 30 screening, 20 QC, 30 labeled


def _load(**options: Any) -> demo.DemoLoadResult:
    defaults: dict[str, Any] = {
        "solutions_per_problem": PER_PROBLEM,
        "admin_password": "adm-pw",
        "labeler_password": "lab-pw",
        "problems": PROBLEMS,
    }
    return demo_load(**{**defaults, **options})


@pytest.mark.django_db
def test_load_demo_creates_real_problems_solutions_tasks_and_logins():
    result = _load()

    problems = list(Problem.objects.all())
    assert len(problems) == PROBLEMS == result.problems_total == result.problems_created
    for problem in problems:
        assert problem.unique_id.startswith("champ/P_")
        assert problem.answer
        assert problem.solution
        assert problem.subject
        assert problem.split == Split.TEST
        assert problem.problem_sha256 == text_sha256(problem.problem)

    solutions = list(Solution.objects.all())
    # The first PER_PROBLEM conversations of each problem, plus its annotated ones.
    assert PROBLEMS * PER_PROBLEM <= len(solutions) == result.solutions_created <= PROBLEMS * (PER_PROBLEM + 2)
    assert {s.source_model for s in solutions} <= {"GPT-3.5", "GPT-4", "GPT-4 Turbo", "PaLM 2 Medium"}
    for solution in solutions:
        assert solution.steps and all(step.strip() == step and step for step in solution.steps)
        assert solution.content_sha256 == content_sha256(solution.steps, solution.final_answer)
        assert solution.generator == GENERATOR and "|" in solution.source_key
    # The extracted answer, not the last sentence: short, and mostly found.
    answered = [s for s in solutions if s.final_answer]
    assert len(answered) > 0.95 * len(solutions)
    assert sorted(len(s.final_answer) for s in answered)[len(answered) // 2] < 20

    generation = Generation.objects.get(number=0)
    assert (generation.phase, generation.status) == (Phase.TWO, GenerationStatus.OPEN)
    open_tasks = list(
        Task.objects.filter(generation=generation, status=TaskStatus.OPEN, kind=TaskKind.NORMAL).select_related(
            "solution__problem"
        )
    )
    # Up to DEFAULT_OPEN_PER_PROBLEM per problem, of the solutions nobody annotated.
    annotated = {
        (p.unique_id, a.conversation)
        for p in demo.read_champ(solutions_per_problem=PER_PROBLEM)[:PROBLEMS]
        for a in p.annotations
    }
    per_problem = Counter(t.solution.problem_id for t in open_tasks)
    assert max(per_problem.values()) == demo.DEFAULT_OPEN_PER_PROBLEM
    assert len(per_problem) > PROBLEMS // 2
    assert not {(t.solution.problem.unique_id, t.solution.source_key) for t in open_tasks} & annotated
    for task in open_tasks:
        assert (task.kind, task.serial, task.labelers_needed, task.is_quality_control) == (
            TaskKind.NORMAL,
            0,
            1,
            False,
        )
        assert -1 <= task.priority < 0  # after any later generation's picks (scores in [0, 1])
    # Every solution not served is the pool the next generation scores.
    served = set(Task.objects.values_list("solution_id", flat=True))
    assert result.pool == len(solutions) - len(served) > 0

    admin = get_user_model().objects.get(username="admin")
    assert admin.is_staff and admin.is_superuser
    labeler_user = get_user_model().objects.get(username="labeler")
    assert not labeler_user.is_staff
    assert labeler_user.labeler.status == LabelerStatus.ACTIVE
    assert Client().login(username="admin", password="adm-pw")
    assert Client().login(username="labeler", password="lab-pw")


@pytest.mark.django_db
def test_the_human_annotations_not_kept_as_gold_are_labeled_generation_zero_work():
    result = _load()
    annotations = {
        (p.unique_id, a.conversation): a
        for p in demo.read_champ(solutions_per_problem=PER_PROBLEM)[:PROBLEMS]
        for a in p.annotations
    }
    roles = demo.annotation_roles(demo.read_champ(solutions_per_problem=PER_PROBLEM)[:PROBLEMS])
    labeled = [key for key, role in roles.items() if role == demo.ROLE_LABELED]
    assert result.labeled_created == len(labeled) == len(annotations) - 50 > 0
    assert len(result.gold) == 50
    assert Counter(g.role for g in result.gold) == {demo.ROLE_SCREENING: 30, demo.ROLE_QUALITY_CONTROL: 20}

    submitted = Assignment.objects.filter(status=AssignmentStatus.SUBMITTED).select_related(
        "task__solution__problem", "labeler"
    )
    assert submitted.count() == len(labeled)
    for assignment in submitted:
        solution = assignment.task.solution
        annotation = annotations[(solution.problem.unique_id, solution.source_key)]
        assert (assignment.task.generation.number, assignment.task.status) == (0, TaskStatus.DONE)
        assert assignment.labeler.user is None and assignment.labeler.status == LabelerStatus.ACTIVE
        ratings = list(
            StepRating.objects.filter(step__assignment=assignment)
            .order_by("step__index")
            .values_list("rating", flat=True)
        )
        if annotation.first_wrong is None:
            assert assignment.finish_reason == FinishReason.SOLUTION
            assert ratings == [1] * len(solution.steps)
        else:
            assert assignment.finish_reason == FinishReason.FOUND_ERROR
            assert ratings == [1] * annotation.first_wrong + [-1]
        assert assignment.label_steps_json
    # What training reads: every labeled solution, with the annotated step negative.
    from activelearn.checkpoints.training_data import labeled_solutions_list

    assert len(labeled_solutions_list()) == len(labeled)


def test_the_first_wrong_step_is_the_step_holding_the_annotated_character():
    text = "First line.\n\nSecond, wrong, line.\n\nThird."
    steps = split_steps(text)
    assert demo.first_wrong_step(text, steps, text.index("wrong")) == 1
    assert demo.first_wrong_step(text, steps, 0) == 0
    assert demo.first_wrong_step(text, steps, None) is None


@pytest.mark.django_db
def test_second_run_creates_nothing():
    _load(admin_password="a", labeler_password="l")
    before = _counts()
    again = _load(admin_password="a", labeler_password="l")
    assert _counts() == before
    assert (again.problems_created, again.solutions_created, again.tasks_created) == (0, 0, 0)
    assert not again.admin.created and not again.labeler.created
    assert again.admin.password_works and again.labeler.password_works


@pytest.mark.django_db
def test_a_run_over_rows_an_earlier_version_loaded_updates_their_answer_instead_of_duplicating_them():
    _load(admin_password="a", labeler_password="l")
    # As earlier versions stored them: the last step as the answer, no provenance.
    old = []
    for solution in Solution.objects.all():
        assert solution.steps
        solution.final_answer = solution.steps[-1]
        solution.content_sha256 = content_sha256(solution.steps, solution.final_answer)
        solution.generator = solution.source_key = ""
        old.append(solution)
    Solution.objects.bulk_update(old, ["final_answer", "content_sha256", "generator", "source_key"])
    before = _counts()

    _load(admin_password="a", labeler_password="l")

    assert _counts() == before
    current = {
        (p.unique_id, s.conversation): s
        for p in demo.read_champ(solutions_per_problem=PER_PROBLEM)
        for s in p.solutions
    }
    for solution in Solution.objects.select_related("problem"):
        expected = current[(solution.problem.unique_id, solution.source_key)]
        assert solution.final_answer == expected.final_answer
        assert solution.content_sha256 == content_sha256(solution.steps, solution.final_answer)
        assert solution.generator == GENERATOR


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
        call_command(
            "load_demo", "--solutions-per-problem", str(PER_PROBLEM), "--problems", "3", "--no-grade", stdout=out
        )
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
    monkeypatch.setattr("activelearn.management.commands.load_demo.default_passwords_allowed", lambda *, debug: False)
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
