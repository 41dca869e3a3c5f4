"""Demo data: real competition problems and real LLM solutions from CHAMP.

The ``champ-dataset`` package ships 270 competition math problems (CHAMP,
Mao et al., 2024) with reference solutions and answers, and 72 recorded
conversations per problem in which GPT-3.5, GPT-4, GPT-4 Turbo and PaLM 2
Medium solve it under 18 prompt conditions (zero-shot, few-shot, with hints,
with a partial solution, ...). ``demo_load`` turns them into what a labeler
works on in phase 2: problems, solutions split one step per line, generation 0
and one open task per solution, plus a demo admin and an active demo labeler.

Choices, so that a reader of the demo data knows what it is:

- ``Problem.unique_id`` is ``champ/<identifier>`` (``champ/P_Combinatorics_1``)
  so demo problems can never collide with imported PRM800K/MATH ids.
- ``Problem.split`` is ``test``: CHAMP is an evaluation benchmark, and no
  problem of it belongs to MATH's training split.
- ``Problem.level`` is null: CHAMP does not grade difficulty.
- A conversation's solution is the model message answered by the final
  "summarize" prompt; the one-sentence summary itself is not used, because a
  final answer must follow from the steps the labeler sees (a truncated
  solution's summary often states an answer its steps never reach).
- Solutions are taken per problem in a fixed order: zero-shot for each model,
  then 5-shot, then the hint/concept conditions, and last the two conditions
  that hand the model part of the reference solution (their replies start
  mid-way, "2. ...", or discuss "the partial solution you provided").
- ``Solution.source_model`` is the model's name as CHAMP records it
  (``GPT-4``); the prompt condition is not part of it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction

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
    content_sha256,
    text_sha256,
)

CHAMP_VERSION = "v0"
UNIQUE_ID_PREFIX = "champ/"
DEMO_GENERATION_NUMBER = 0
DEFAULT_SOLUTIONS_PER_PROBLEM = 8
DEMO_ADMIN_USERNAME = "admin"
DEMO_LABELER_USERNAME = "labeler"
# Well-known on purpose: `make run` prints them. The command refuses them
# outside a local setup (see ``default_passwords_allowed``).
DEFAULT_ADMIN_PASSWORD = "admin"
DEFAULT_LABELER_PASSWORD = "labeler"

_MODEL_ROLE_PREFIX = "Model."
_SUMMARY_PROMPT_PREFIX = "Now, summarize"
# Conditions whose prompt contains part of the reference solution: served last.
_PARTIAL_SOLUTION_CONDITIONS = frozenset({"1/3 Soln", "2/3 Soln"})
# 5-shot replies imitate the exemplars' "Step-wise solution:" header; it is
# formatting, not a step anyone should rate.
_HEADER_LINE = re.compile(r"^\s*step-wise solution:\s*$", re.IGNORECASE)
_BEGIN_ENV = re.compile(r"\\begin\{[^}]*\}")
_END_ENV = re.compile(r"\\end\{[^}]*\}")
_BOXED = "\\boxed"
# (problem pk, content_sha256, source_model): the solution_unique_per_problem key.
_SolutionKey = tuple[int, str, str]


class DemoError(Exception):
    """The demo data cannot be loaded as asked; the message says why."""


@dataclass(frozen=True)
class DemoSolution:
    conversation: str  # CHAMP's key, "<model>|<condition>"
    source_model: str
    steps: list[str]
    final_answer: str | None


@dataclass(frozen=True)
class DemoProblem:
    unique_id: str
    problem: str
    solution: str
    answer: str
    subject: str
    solutions: list[DemoSolution]


@dataclass(frozen=True)
class DemoLogin:
    username: str
    password: str
    created: bool
    # False when the account existed with another password and this run did
    # not reset it: the printed password would then not work.
    password_works: bool
    is_staff: bool


@dataclass(frozen=True)
class DemoLoadResult:
    problems_created: int
    problems_total: int
    solutions_created: int
    solutions_total: int
    tasks_created: int
    tasks_total: int
    generation_number: int
    generation_status: str
    admin: DemoLogin
    labeler: DemoLogin


# --- Reading CHAMP -----------------------------------------------------------


def _block_is_open(lines: list[str]) -> bool:
    """Whether the lines so far leave a display-math, environment or code block open."""
    text = "\n".join(lines)
    if text.count("```") % 2:
        return True
    if text.count("$$") % 2:
        return True
    if text.count("\\[") > text.count("\\]"):
        return True
    return len(_BEGIN_ENV.findall(text)) > len(_END_ENV.findall(text))


def split_steps(text: str) -> list[str]:
    """Split a model's solution into steps, one per non-empty line (as PRM800K does).

    Lines inside a display block (``\\[ ... \\]``, ``$$ ... $$``,
    ``\\begin{..} ... \\end{..}``, a fenced code block) stay together in one
    step: a step holding half a formula could not be rendered or rated. A block
    still open at the end of the text (a truncated reply) is not merged, so a
    stray ``\\[`` cannot swallow the rest of the solution.
    """
    steps: list[str] = []
    block: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if not block and not steps and _HEADER_LINE.match(line):
            continue
        block.append(line if block else line.strip())
        if not _block_is_open(block):
            steps.append("\n".join(block).strip())
            block = []
    steps.extend(line.strip() for line in block)
    return steps


def _last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}``, braces balanced; None if there is none."""
    start = text.rfind(_BOXED + "{")
    while start != -1:
        depth = 0
        begin = start + len(_BOXED) + 1
        for pos in range(begin - 1, len(text)):
            char = text[pos]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    return text[begin:pos].strip()
        # Unbalanced (a truncated reply): try an earlier one.
        start = text.rfind(_BOXED + "{", 0, start)
    return None


def extract_final_answer(steps: list[str]) -> str | None:
    """The final answer: the last ``\\boxed{}`` if there is one, else the last step."""
    if not steps:
        return None
    boxed = _last_boxed("\n".join(steps))
    return boxed if boxed is not None else steps[-1]


def _solution_message(messages: list[Any]) -> Any | None:
    """The model message that the final "summarize" prompt answers, or None."""
    for index in range(len(messages) - 1, 0, -1):
        message = messages[index]
        if message.role == "User":
            if not (message.text or "").startswith(_SUMMARY_PROMPT_PREFIX):
                return None
            previous = messages[index - 1]
            return previous if str(previous.role).startswith(_MODEL_ROLE_PREFIX) else None
    return None


def _conversation_order(keys: Iterable[str]) -> list[str]:
    """CHAMP's conversation keys in serving order: by condition, models interleaved."""
    models: list[str] = []
    conditions: list[str] = []
    for key in keys:
        model, _, condition = key.partition("|")
        if model not in models:
            models.append(model)
        if condition not in conditions:
            conditions.append(condition)
    ranked = [c for c in conditions if c not in _PARTIAL_SOLUTION_CONDITIONS] + [
        c for c in conditions if c in _PARTIAL_SOLUTION_CONDITIONS
    ]
    condition_rank = {c: i for i, c in enumerate(ranked)}
    model_rank = {m: i for i, m in enumerate(models)}

    def rank(key: str) -> tuple[int, int]:
        model, _, condition = key.partition("|")
        return condition_rank[condition], model_rank[model]

    return sorted(keys, key=rank)


def read_champ(*, solutions_per_problem: int | None) -> list[DemoProblem]:
    """Read CHAMP's problems and up to ``solutions_per_problem`` usable solutions each (None: all)."""
    if solutions_per_problem is not None and solutions_per_problem < 0:
        raise DemoError(f"solutions per problem must be 0 or more, got {solutions_per_problem}")
    try:
        import champ_dataset
    except ImportError:
        raise DemoError("the champ-dataset package is not installed (pip install -r requirements.txt)") from None
    try:
        dataset = champ_dataset.load(CHAMP_VERSION)
    except (OSError, ValueError, KeyError) as exc:
        raise DemoError(f"cannot read CHAMP {CHAMP_VERSION} from the champ-dataset package: {exc}") from exc

    problems: list[DemoProblem] = []
    for identifier, item in dataset.problems.items():
        solutions: list[DemoSolution] = []
        seen: set[tuple[str, str]] = set()
        conversations = item.conversations or {}
        for key in _conversation_order(conversations):
            if solutions_per_problem is not None and len(solutions) >= solutions_per_problem:
                break
            message = _solution_message(conversations[key].messages or [])
            # Replies cut off by the length limit, and empty ones, are not solutions.
            if message is None or message.error is not None or not message.text:
                continue
            steps = split_steps(message.text)
            if not steps:
                continue
            source_model = str(message.role)[len(_MODEL_ROLE_PREFIX) :]
            # Two conditions can yield the same text from the same model; the
            # database keeps one (solution_unique_per_problem), so do we.
            final_answer = extract_final_answer(steps)
            identity = (content_sha256(steps, final_answer), source_model)
            if identity in seen:
                continue
            seen.add(identity)
            solutions.append(
                DemoSolution(
                    conversation=key,
                    source_model=source_model,
                    steps=steps,
                    final_answer=final_answer,
                )
            )
        reference_steps = item.solution.steps if item.solution and item.solution.steps else []
        problems.append(
            DemoProblem(
                unique_id=f"{UNIQUE_ID_PREFIX}{identifier}",
                problem=item.text,
                solution="\n".join(step.text for step in reference_steps),
                answer=item.answer,
                subject=item.category or "",
                solutions=solutions,
            )
        )
    return problems


# --- Loading -------------------------------------------------------------------


def task_priority(unique_id: str, conversation: str) -> float:
    """A stable pseudo-random priority in [0, 1).

    Equal priorities would serve one problem's solutions back to back (the
    queue breaks ties by id); hashing spreads them out, and gives every run,
    and every cap, the same value for the same solution.
    """
    digest = hashlib.sha256(f"{unique_id}|{conversation}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def default_passwords_allowed(*, debug: bool) -> bool:
    """The well-known demo passwords are only for a local run: DEBUG or the embedded SQLite."""
    return debug or connection.vendor == "sqlite"


def _ensure_user(*, username: str, password: str, staff: bool, reset_password: bool) -> tuple[Any, DemoLogin]:
    user_model = get_user_model()
    user: AbstractBaseUser
    try:
        user = user_model.objects.get(**{user_model.USERNAME_FIELD: username})
        created = False
    except user_model.DoesNotExist:
        user = user_model(**{user_model.USERNAME_FIELD: username, "is_staff": staff, "is_superuser": staff})
        created = True
    if created or reset_password:
        user.set_password(password)
        user.save()
        works = True
    else:
        # Never overwrite a password someone chose; say whether ours still works.
        works = user.check_password(password)
    login = DemoLogin(
        username=username,
        password=password,
        created=created,
        password_works=works,
        is_staff=bool(getattr(user, "is_staff", False)),
    )
    return user, login


def demo_load(
    *,
    solutions_per_problem: int | None,
    admin_password: str,
    labeler_password: str,
    reset_passwords: bool = False,
    progress: Callable[[str], None] | None = None,
) -> DemoLoadResult:
    """Load CHAMP as generation-0 work and create the demo logins; idempotent.

    Rows that already exist (by ``Problem.unique_id``, the
    ``solution_unique_per_problem`` and ``task_unique_per_generation``
    constraints, usernames) are left untouched, so a second run creates
    nothing. Everything happens in one transaction.
    """

    def say(message: str) -> None:
        if progress is not None:
            progress(message)

    say(f"Reading CHAMP {CHAMP_VERSION} from the champ-dataset package...")
    demo_problems = read_champ(solutions_per_problem=solutions_per_problem)
    solution_count = sum(len(p.solutions) for p in demo_problems)
    say(f"  {len(demo_problems)} problems, {solution_count} solutions selected")

    with transaction.atomic():
        # Problems.
        wanted_ids = [p.unique_id for p in demo_problems]
        existing = set(Problem.objects.filter(unique_id__in=wanted_ids).values_list("unique_id", flat=True))
        new_problems = [
            Problem(
                unique_id=p.unique_id,
                problem=p.problem,
                problem_sha256=text_sha256(p.problem),
                solution=p.solution,
                answer=p.answer,
                subject=p.subject,
                level=None,
                split=Split.TEST,
            )
            for p in demo_problems
            if p.unique_id not in existing
        ]
        Problem.objects.bulk_create(new_problems)
        problem_pk = dict(Problem.objects.filter(unique_id__in=wanted_ids).values_list("unique_id", "pk"))
        say(f"Problems: {len(new_problems)} created, {len(existing)} already there")

        # Solutions.
        solution_pk: dict[_SolutionKey, int] = {
            (problem_id, sha, model): pk
            for pk, problem_id, sha, model in Solution.objects.filter(problem_id__in=problem_pk.values()).values_list(
                "pk", "problem_id", "content_sha256", "source_model"
            )
        }
        selected: list[tuple[_SolutionKey, DemoProblem, DemoSolution]] = []
        new_solutions: list[Solution] = []
        for p in demo_problems:
            for s in p.solutions:
                key = (problem_pk[p.unique_id], content_sha256(s.steps, s.final_answer), s.source_model)
                selected.append((key, p, s))
                if key not in solution_pk:
                    new_solutions.append(
                        Solution(
                            problem_id=key[0],
                            steps=s.steps,
                            content_sha256=key[1],
                            final_answer=s.final_answer,
                            source_model=s.source_model,
                        )
                    )
        Solution.objects.bulk_create(new_solutions, batch_size=500)
        if new_solutions:
            # bulk_create does not return primary keys on every backend; read them back.
            solution_pk = {
                (problem_id, sha, model): pk
                for pk, problem_id, sha, model in Solution.objects.filter(
                    problem_id__in=problem_pk.values()
                ).values_list("pk", "problem_id", "content_sha256", "source_model")
            }
        say(f"Solutions: {len(new_solutions)} created, {len(selected) - len(new_solutions)} already there")

        # Generation 0 and its tasks.
        generation, _ = Generation.objects.get_or_create(
            number=DEMO_GENERATION_NUMBER,
            defaults={
                "phase": Phase.TWO,
                "status": GenerationStatus.OPEN,
                "config": {"source": f"champ-dataset {CHAMP_VERSION} (load_demo)"},
            },
        )
        if generation.phase != Phase.TWO:
            raise DemoError(f"generation {DEMO_GENERATION_NUMBER} exists but is not a phase-2 generation")
        tasked = set(
            Task.objects.filter(
                generation=generation,
                kind=TaskKind.NORMAL,
                serial=0,
                solution_id__in=[solution_pk[key] for key, _, _ in selected],
            ).values_list("solution_id", flat=True)
        )
        new_tasks = [
            Task(
                generation=generation,
                solution_id=solution_pk[key],
                kind=TaskKind.NORMAL,
                is_quality_control=False,
                serial=0,
                priority=task_priority(p.unique_id, s.conversation),
                labelers_needed=1,
            )
            for key, p, s in selected
            if solution_pk[key] not in tasked
        ]
        Task.objects.bulk_create(new_tasks, batch_size=500)
        say(f"Generation {generation.number} ({generation.status}): {len(new_tasks)} tasks created")

        # Logins.
        _, admin = _ensure_user(
            username=DEMO_ADMIN_USERNAME, password=admin_password, staff=True, reset_password=reset_passwords
        )
        labeler_user, labeler = _ensure_user(
            username=DEMO_LABELER_USERNAME, password=labeler_password, staff=False, reset_password=reset_passwords
        )
        if labeler.created:
            # Active straight away (no screening) so the demo can be labeled at
            # once; update_or_create also covers a Labeler made by a signal.
            Labeler.objects.update_or_create(user=labeler_user, defaults={"status": LabelerStatus.ACTIVE})
        else:
            Labeler.objects.get_or_create(user=labeler_user, defaults={"status": LabelerStatus.ACTIVE})

        return DemoLoadResult(
            problems_created=len(new_problems),
            problems_total=Problem.objects.filter(unique_id__startswith=UNIQUE_ID_PREFIX).count(),
            solutions_created=len(new_solutions),
            solutions_total=Solution.objects.filter(problem__unique_id__startswith=UNIQUE_ID_PREFIX).count(),
            tasks_created=len(new_tasks),
            tasks_total=Task.objects.filter(generation=generation).count(),
            generation_number=DEMO_GENERATION_NUMBER,
            generation_status=str(generation.status),
            admin=admin,
            labeler=labeler,
        )
