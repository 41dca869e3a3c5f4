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
  "summarize" prompt, split into steps by the shared splitter
  (``mathtext.splitting``). Its final answer is the one the steps
  state (``activelearn.grading.extract_final_answer``: a box, "the answer is",
  the concluding sentence); the one-sentence summary is read only when the
  steps state none, because a final answer should follow from the steps the
  labeler sees. Replies cut off by the length limit are not loaded at all.
- ``Solution.generator`` is ``champ-dataset v0`` and ``Solution.source_key`` the
  conversation key (``GPT-4|0-Shot``). Rows loaded by earlier versions (last
  line as the answer, no provenance) are brought up to date on the next run.
- Solutions are taken per problem in a fixed order: zero-shot for each model,
  then 5-shot, then the hint/concept conditions, and last the two conditions
  that hand the model part of the reference solution (their replies start
  mid-way, "2. ...", or discuss "the partial solution you provided").
- ``Solution.source_model`` is the model's name as CHAMP records it
  (``GPT-4``); the prompt condition is not part of it.
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from labeling.data.labels import label_steps_for
from labeling.models import (
    Assignment,
    AssignmentStatus,
    FinishReason,
    Generation,
    GenerationStatus,
    LabeledStep,
    Labeler,
    LabelerStatus,
    Phase,
    Problem,
    SelectionReason,
    Solution,
    Split,
    StepRating,
    Task,
    TaskKind,
    TaskStatus,
    content_sha256,
    text_sha256,
)
from mathtext.extraction import extract_final_answer
from mathtext.splitting import split_steps

CHAMP_VERSION = "v0"
UNIQUE_ID_PREFIX = "champ/"
DEMO_GENERATION_NUMBER = 0
# Every distinct conversation: the pool the next generations select from.
DEFAULT_SOLUTIONS_PER_PROBLEM: int | None = None
# Generation 0's open tasks per problem; the other unlabeled solutions are the pool.
DEFAULT_OPEN_PER_PROBLEM = 2
# Generation 0's QC items (the generation's QC pool; settings.QC_ITEMS_MAX bounds it).
DEMO_QC_ITEMS = 20
ROLE_SCREENING, ROLE_QUALITY_CONTROL, ROLE_LABELED = "screening", "quality control", "labeled"
# The one labeler CHAMP's first-wrong-step annotations are credited to (no login).
CHAMP_ANNOTATOR_UUID = uuid.uuid5(uuid.NAMESPACE_URL, "champ-dataset:fws-annotators")
DEMO_ADMIN_USERNAME = "admin"
DEMO_LABELER_USERNAME = "labeler"
# Well-known on purpose: `make run` prints them. The command refuses them
# outside a local setup (see ``default_passwords_allowed``).
DEFAULT_ADMIN_PASSWORD = "admin"
DEFAULT_LABELER_PASSWORD = "labeler"

GENERATOR = f"champ-dataset {CHAMP_VERSION}"
_MODEL_ROLE_PREFIX = "Model."
_SUMMARY_PROMPT_PREFIX = "Now, summarize"
# Conditions whose prompt contains part of the reference solution: served last.
_PARTIAL_SOLUTION_CONDITIONS = frozenset({"1/3 Soln", "2/3 Soln"})
# (problem pk, content_sha256, source_model): the solution_unique_per_problem key.
_SolutionKey = tuple[int, str, str]


class DemoError(Exception):
    """The demo data cannot be loaded as asked; the message says why."""


@dataclass(frozen=True)
class DemoSolution:
    conversation: str  # CHAMP's key, "<model>|<condition>"; stored as Solution.source_key
    source_model: str
    steps: list[str]
    final_answer: str | None
    summary: str | None  # the model's one-sentence summary turn, if it gave one


@dataclass(frozen=True)
class DemoAnnotation:
    """A CHAMP first-wrong-step annotation: a person read the solution and marked where it goes wrong."""

    conversation: str  # the annotated conversation, as in ``DemoSolution.conversation``
    steps: list[str]  # the annotated solution, split by the shared splitter
    first_wrong: int | None  # index of the first wrong step; None: no mistake anywhere


@dataclass(frozen=True)
class DemoProblem:
    unique_id: str
    problem: str
    solution: str
    answer: str
    subject: str
    solutions: list[DemoSolution]
    annotations: list[DemoAnnotation] = field(default_factory=list)


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
class DemoGold:
    solution_id: int
    first_wrong: int | None
    role: str  # ROLE_SCREENING or ROLE_QUALITY_CONTROL


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
    labeled_created: int = 0
    # The annotations to make gold (labeling.quality builds them: this room cannot).
    gold: list[DemoGold] = field(default_factory=list)
    pool: int = 0  # solutions never served: what the next generations score and select from


# --- Reading CHAMP -----------------------------------------------------------


def solution_message(messages: list[Any]) -> tuple[Any, str | None] | None:
    """The model message that the final "summarize" prompt answers, with the model's
    one-sentence summary (None if it has none); None if there is no such message."""
    for index in range(len(messages) - 1, 0, -1):
        message = messages[index]
        if message.role == "User":
            if not (message.text or "").startswith(_SUMMARY_PROMPT_PREFIX):
                return None
            previous = messages[index - 1]
            if not str(previous.role).startswith(_MODEL_ROLE_PREFIX):
                return None
            reply = messages[index + 1] if index + 1 < len(messages) else None
            summary = reply.text if reply is not None and reply.error is None and reply.text else None
            return previous, summary
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


def read_champ(*, solutions_per_problem: int | None, limit_problems: int | None = None) -> list[DemoProblem]:
    """Read CHAMP's problems and up to ``solutions_per_problem`` usable solutions each (None: all);
    only the first ``limit_problems`` problems when given (splitting and reading the answers of all
    19,440 solutions takes some 12 CPU-s)."""
    if solutions_per_problem is not None and solutions_per_problem < 0:
        raise DemoError(f"solutions per problem must be 0 or more, got {solutions_per_problem}")
    if limit_problems is not None and limit_problems < 1:
        raise DemoError(f"the number of problems to read must be 1 or more, got {limit_problems}")
    try:
        import champ_dataset
    except ImportError:
        raise DemoError("the champ-dataset package is not installed (pip install -r requirements.txt)") from None
    try:
        dataset = champ_dataset.load(CHAMP_VERSION)
    except (OSError, ValueError, KeyError) as exc:
        raise DemoError(f"cannot read CHAMP {CHAMP_VERSION} from the champ-dataset package: {exc}") from exc

    problems: list[DemoProblem] = []
    for identifier, item in itertools.islice(dataset.problems.items(), limit_problems):
        usable: list[DemoSolution] = []
        seen: set[tuple[str, str]] = set()
        conversations = item.conversations or {}
        for key in _conversation_order(conversations):
            solution = _conversation_solution(key, conversations[key].messages or [])
            if solution is None:
                continue
            # Two conditions can yield the same text from the same model; the
            # database keeps one (solution_unique_per_problem), so do we.
            identity = (content_sha256(solution.steps, solution.final_answer), solution.source_model)
            if identity in seen:
                continue
            seen.add(identity)
            usable.append(solution)
        solutions = usable if solutions_per_problem is None else usable[:solutions_per_problem]
        annotations: list[DemoAnnotation] = []
        if solutions_per_problem != 0:
            for key, annotation in sorted((item.fws_annotations or {}).items()):
                found = _annotation(key, annotation)
                if found is None:
                    continue
                # The annotated solution is always loaded, whatever the cap: its label needs it.
                by_steps = next((s for s in usable if s.steps == found.steps), None)
                if by_steps is None:
                    continue  # the conversation's reply was cut off or empty: nothing to label
                if any(a.conversation == by_steps.conversation for a in annotations):
                    continue  # two annotated conversations with one text: one solution, labeled once
                if by_steps not in solutions:
                    solutions.append(by_steps)
                annotations.append(DemoAnnotation(by_steps.conversation, found.steps, found.first_wrong))
        reference_steps = item.solution.steps if item.solution and item.solution.steps else []
        problems.append(
            DemoProblem(
                unique_id=f"{UNIQUE_ID_PREFIX}{identifier}",
                problem=item.text,
                solution="\n".join(step.text for step in reference_steps),
                answer=item.answer,
                subject=item.category or "",
                solutions=solutions,
                annotations=annotations,
            )
        )
    return problems


def _conversation_solution(key: str, messages: list[Any]) -> DemoSolution | None:
    found = solution_message(messages)
    if found is None:
        return None
    message, summary = found
    # Replies cut off by the length limit, and empty ones, are not solutions.
    if message.error is not None or not message.text:
        return None
    steps = split_steps(message.text)
    if not steps:
        return None
    return DemoSolution(
        conversation=key,
        source_model=str(message.role)[len(_MODEL_ROLE_PREFIX) :],
        steps=steps,
        final_answer=extract_final_answer("\n".join(steps), summary=summary),
        summary=summary,
    )


def step_spans(text: str, steps: list[str]) -> list[tuple[int, int]]:
    """Character span of each step in the reply it was split from (steps are stripped lines)."""
    spans: list[tuple[int, int]] = []
    cursor = 0
    for step in steps:
        first, last = step.split("\n", 1)[0], step.rsplit("\n", 1)[-1]
        start = text.find(first, cursor)
        start = cursor if start < 0 else start
        end = text.find(last, start)
        end = start + len(first) if end < 0 else end + len(last)
        spans.append((start, end))
        cursor = end
    return spans


def first_wrong_step(text: str, steps: list[str], start_idx: int | None) -> int | None:
    """The step that holds CHAMP's annotated first wrong character (None: no mistake)."""
    if start_idx is None:
        return None
    spans = step_spans(text, steps)
    return next((i for i, (_, end) in enumerate(spans) if start_idx < end), len(steps) - 1)


def _annotation(key: str, annotation: Any) -> DemoAnnotation | None:
    steps = split_steps(annotation.text or "")
    if not steps:
        return None
    return DemoAnnotation(key, steps, first_wrong_step(annotation.text, steps, annotation.start_idx))


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


def annotation_roles(problems: list[DemoProblem]) -> dict[tuple[str, str], str]:
    """What each human annotation becomes: screening gold, QC gold, or labeled work.

    By a stable hash of (problem, conversation), so the three sets mix problems,
    models and error positions, and every run (and every ``--problems`` size) picks
    the same items: the first ``SCREENING_SET_SIZE`` screen new labelers, the next
    ``DEMO_QC_ITEMS`` are generation 0's QC items, the rest are labels to train on.
    """
    keys = sorted(
        ((p.unique_id, a.conversation) for p in problems for a in p.annotations),
        key=lambda key: task_priority(*key),
    )
    screening = settings.SCREENING_SET_SIZE
    roles: dict[tuple[str, str], str] = {}
    for position, key in enumerate(keys):
        if position < screening:
            roles[key] = ROLE_SCREENING
        elif position < screening + DEMO_QC_ITEMS:
            roles[key] = ROLE_QUALITY_CONTROL
        else:
            roles[key] = ROLE_LABELED
    return roles


def demo_load(
    *,
    solutions_per_problem: int | None,
    admin_password: str,
    labeler_password: str,
    reset_passwords: bool = False,
    open_per_problem: int = DEFAULT_OPEN_PER_PROBLEM,
    problems: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> DemoLoadResult:
    """Load CHAMP as a small campaign and create the demo logins; idempotent.

    Every distinct usable conversation becomes a solution. CHAMP's human
    first-wrong-step annotations become the screening set, generation 0's QC gold
    and labeled generation-0 work (``annotation_roles``); ``open_per_problem``
    further solutions per problem are generation 0's open tasks, and the rest stay
    in the pool the next generation scores. The gold itself and the grading are
    built above this room (``activelearn.demo``), from ``DemoLoadResult.gold``.
    Rows that already exist (by ``Problem.unique_id``, the
    ``solution_unique_per_problem`` and ``task_unique_per_generation`` constraints,
    usernames) are left untouched, so a second run creates nothing. Everything
    happens in one transaction.
    """

    def say(message: str) -> None:
        if progress is not None:
            progress(message)

    if open_per_problem < 0:
        raise DemoError(f"open tasks per problem must be 0 or more, got {open_per_problem}")
    if problems is not None and problems < 1:
        raise DemoError(f"the number of problems must be at least 1, got {problems}")
    say(f"Reading CHAMP {CHAMP_VERSION} from the champ-dataset package...")
    demo_problems = read_champ(solutions_per_problem=solutions_per_problem, limit_problems=problems)
    solution_count = sum(len(p.solutions) for p in demo_problems)
    annotation_count = sum(len(p.annotations) for p in demo_problems)
    say(f"  {len(demo_problems)} problems, {solution_count} solutions, {annotation_count} human annotations")

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

        # Solutions, in serving order per problem (the pool takes the lowest ids first).
        solution_pk, updated = _demo_solutions_upgrade(demo_problems, problem_pk)
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
                            generator=GENERATOR,
                            source_key=s.conversation,
                        )
                    )
        Solution.objects.bulk_create(new_solutions, batch_size=500)
        if new_solutions:
            # bulk_create does not return primary keys on every backend; read them back.
            solution_pk = _demo_solution_keys(problem_pk.values())
        say(
            f"Solutions: {len(new_solutions)} created, {len(selected) - len(new_solutions)} already there"
            + (f" ({updated} given their extracted answer and conversation key)" if updated else "")
        )
        by_conversation = {(p.unique_id, s.conversation): solution_pk[key] for key, p, s in selected}

        # Generation 0.
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

        # The human annotations: gold (screening, QC) and labeled work.
        roles = annotation_roles(demo_problems)
        annotated = {(p.unique_id, a.conversation): (p, a) for p in demo_problems for a in p.annotations}
        gold = [
            DemoGold(solution_id=by_conversation[key], first_wrong=annotated[key][1].first_wrong, role=role)
            for key, role in sorted(roles.items(), key=lambda item: task_priority(*item[0]))
            if role != ROLE_LABELED
        ]
        labeled_created = _demo_labeled_work(annotated, roles, by_conversation, generation)
        say(f"Human annotations: {len(gold)} kept as gold, {labeled_created} loaded as labeled generation-0 work")

        # Generation 0's open tasks: the first unlabeled solutions of each problem.
        served = set(
            Task.objects.filter(solution_id__in=by_conversation.values()).values_list("solution_id", flat=True)
        )
        open_tasks: list[Task] = []
        for p in demo_problems:
            taken = 0
            for s in p.solutions:
                if taken >= open_per_problem:
                    break
                if (p.unique_id, s.conversation) in annotated:
                    continue
                taken += 1
                solution_id = by_conversation[(p.unique_id, s.conversation)]
                if solution_id in served:
                    continue
                open_tasks.append(
                    Task(
                        generation=generation,
                        solution_id=solution_id,
                        kind=TaskKind.NORMAL,
                        is_quality_control=False,
                        serial=0,
                        # Below 0, under any convincingness score (a PRM score in [0, 1]): once
                        # a generation opens, its picks are served before generation 0's rest.
                        priority=task_priority(p.unique_id, s.conversation) - 1.0,
                        labelers_needed=1,
                        # No model chose them: CHAMP's order of a problem's solutions says
                        # nothing of their answers or of any PRM, so they are an unselected sample.
                        selection_reason=SelectionReason.UNIFORM,
                    )
                )
        Task.objects.bulk_create(open_tasks, batch_size=500)
        say(f"Generation {generation.number} ({generation.status}): {len(open_tasks)} open tasks created")

        # Logins.
        _, admin = _ensure_user(
            username=DEMO_ADMIN_USERNAME, password=admin_password, staff=True, reset_password=reset_passwords
        )
        labeler_user, labeler = _ensure_user(
            username=DEMO_LABELER_USERNAME, password=labeler_password, staff=False, reset_password=reset_passwords
        )
        if labeler.created:
            # Screened already, so the demo can be labeled at once; update_or_create
            # also covers a Labeler made by a signal.
            Labeler.objects.update_or_create(user=labeler_user, defaults={"status": LabelerStatus.ACTIVE})
        else:
            Labeler.objects.get_or_create(user=labeler_user, defaults={"status": LabelerStatus.ACTIVE})

    demo_solutions = Solution.objects.filter(problem__unique_id__startswith=UNIQUE_ID_PREFIX)
    return DemoLoadResult(
        problems_created=len(new_problems),
        problems_total=Problem.objects.filter(unique_id__startswith=UNIQUE_ID_PREFIX).count(),
        solutions_created=len(new_solutions),
        solutions_total=demo_solutions.count(),
        tasks_created=len(open_tasks) + labeled_created,
        tasks_total=Task.objects.filter(generation=generation).count(),
        generation_number=DEMO_GENERATION_NUMBER,
        generation_status=str(generation.status),
        admin=admin,
        labeler=labeler,
        labeled_created=labeled_created,
        gold=gold,
        pool=demo_solutions.exclude(Exists(Task.objects.filter(solution_id=OuterRef("pk")))).count(),
    )


def _demo_labeled_work(
    annotated: dict[tuple[str, str], tuple[DemoProblem, DemoAnnotation]],
    roles: dict[tuple[str, str], str],
    by_conversation: dict[tuple[str, str], int],
    generation: Generation,
) -> int:
    """The annotations not used as gold, as submitted generation-0 assignments of CHAMP's annotators.

    Steps before the annotated one are +1, the annotated one is -1 and ends the label
    (found_error); an annotation of no mistake is every step +1 (solution). This is
    the PRM800K reading of a first-wrong-step label, so training reads them as it
    reads any labeler's work.
    """
    keys = [key for key, role in sorted(roles.items()) if role == ROLE_LABELED]
    done = set(
        Task.objects.filter(
            generation=generation, kind=TaskKind.NORMAL, solution_id__in=[by_conversation[k] for k in keys]
        ).values_list("solution_id", flat=True)
    )
    keys = [k for k in keys if by_conversation[k] not in done]
    if not keys:
        return 0
    annotator, _ = Labeler.objects.get_or_create(
        uuid=CHAMP_ANNOTATOR_UUID, defaults={"status": LabelerStatus.ACTIVE, "user": None}
    )
    now = timezone.now()
    tasks = Task.objects.bulk_create(
        [
            Task(
                generation=generation,
                solution_id=by_conversation[key],
                kind=TaskKind.NORMAL,
                serial=0,
                priority=task_priority(*key),
                status=TaskStatus.DONE,
                # CHAMP's own annotation of the solution, loaded as labeled work.
                selection_reason=SelectionReason.IMPORTED,
            )
            for key in keys
        ],
        batch_size=500,
    )
    task_of_solution = {
        task.solution_id: task
        for task in Task.objects.filter(generation=generation, solution_id__in=[by_conversation[k] for k in keys]).only(
            "pk", "solution_id", "kind"
        )
    }
    del tasks
    assignments = []
    for key in keys:
        annotation = annotated[key][1]
        assignments.append(
            Assignment.for_task(
                task_of_solution[by_conversation[key]],
                labeler=annotator,
                status=AssignmentStatus.SUBMITTED,
                started_at=now,
                last_activity_at=now,
                submitted_at=now,
                total_time_ms=0,
                finish_reason=FinishReason.SOLUTION if annotation.first_wrong is None else FinishReason.FOUND_ERROR,
                finish_reason_text="CHAMP first-wrong-step annotation",
            )
        )
    Assignment.objects.bulk_create(assignments, batch_size=500)
    assignment_ids = dict(
        Assignment.objects.filter(labeler=annotator, task_id__in=[t.pk for t in task_of_solution.values()]).values_list(
            "task_id", "pk"
        )
    )
    # (assignment, step index, text, is the first wrong step): each labeled step once,
    # for its LabeledStep row and then its rating.
    labeled: list[tuple[int, int, str, bool]] = []
    for key in keys:
        annotation = annotated[key][1]
        assignment_id = assignment_ids[task_of_solution[by_conversation[key]].pk]
        last = len(annotation.steps) - 1 if annotation.first_wrong is None else annotation.first_wrong
        labeled.extend(
            (assignment_id, index, annotation.steps[index], index == annotation.first_wrong)
            for index in range(last + 1)
        )
    LabeledStep.objects.bulk_create(
        [
            LabeledStep(assignment_id=assignment_id, index=index, chosen_completion=None if bad else 0)
            for assignment_id, index, _, bad in labeled
        ],
        batch_size=1000,
    )
    step_ids = {
        (assignment_id, index): pk
        for pk, assignment_id, index in LabeledStep.objects.filter(
            assignment_id__in=assignment_ids.values()
        ).values_list("pk", "assignment_id", "index")
    }
    ratings = [
        StepRating(
            step_id=step_ids[(assignment_id, index)],
            completion_index=0,
            text=text,
            rating=-1 if bad else 1,
            updated_at=now,
        )
        for assignment_id, index, text, bad in labeled
    ]
    StepRating.objects.bulk_create(ratings, batch_size=1000)
    # Frozen as a submission freezes it, so exports stream these like any other record.
    frozen = label_steps_for(list(assignment_ids.values()))
    Assignment.objects.bulk_update(
        [
            Assignment(pk=pk, label_steps_json=orjson.dumps(frozen.get(pk, [])).decode())
            for pk in assignment_ids.values()
        ],
        ["label_steps_json"],
        batch_size=500,
    )
    return len(keys)


def _demo_solution_keys(problem_pks: Iterable[int]) -> dict[_SolutionKey, int]:
    return {
        (problem_id, sha, model): pk
        for pk, problem_id, sha, model in Solution.objects.filter(problem_id__in=list(problem_pks)).values_list(
            "pk", "problem_id", "content_sha256", "source_model"
        )
    }


def _demo_solutions_upgrade(
    demo_problems: list[DemoProblem], problem_pk: dict[str, int]
) -> tuple[dict[_SolutionKey, int], int]:
    """The stored demo solutions by key, after bringing rows loaded by earlier versions
    up to date; returns them and how many rows were updated.

    Earlier versions stored the last line as the final answer and no provenance. Such a
    row is found by its problem, model and steps, and gets the extracted answer (and so
    a new ``content_sha256``), the generator and the conversation key, so a later run
    neither duplicates it nor leaves its answer wrong. Steps, tasks and labels are
    untouched.
    """
    solution_pk = _demo_solution_keys(problem_pk.values())
    by_steps: dict[tuple[int, str, str], tuple[int, str, str]] = {}
    for pk, problem_id, model, steps, sha, source_key in Solution.objects.filter(
        problem_id__in=problem_pk.values()
    ).values_list("pk", "problem_id", "source_model", "steps", "content_sha256", "source_key"):
        if steps is not None:
            by_steps.setdefault((problem_id, model, "\x00".join(steps)), (pk, sha, source_key))
    changed: list[Solution] = []
    for p in demo_problems:
        for s in p.solutions:
            key = (problem_pk[p.unique_id], content_sha256(s.steps, s.final_answer), s.source_model)
            earlier = by_steps.pop((key[0], s.source_model, "\x00".join(s.steps)), None)
            if earlier is None:
                continue
            pk, sha, source_key = earlier
            if sha == key[1] and source_key == s.conversation:
                continue
            if key in solution_pk and solution_pk[key] != pk:
                continue  # the current form is stored already, as another row
            changed.append(
                Solution(
                    pk=pk,
                    final_answer=s.final_answer,
                    content_sha256=key[1],
                    generator=GENERATOR,
                    source_key=s.conversation,
                )
            )
    if not changed:
        return solution_pk, 0
    Solution.objects.bulk_update(changed, ["final_answer", "content_sha256", "generator", "source_key"], batch_size=500)
    return _demo_solution_keys(problem_pk.values()), len(changed)
