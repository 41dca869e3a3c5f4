"""People, problems, solutions, tasks, assignments and step ratings.

The tables follow the PRM800K record format closely enough that an import
followed by an export reproduces every record value for value: a record is one
Assignment (a labeler working on a Task), its ``label.steps`` are LabeledStep
rows and each step's ``completions`` are StepRating rows.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_sha256(steps: list[str] | None, final_answer: str | None) -> str:
    """Identity of a solution's content: its steps and its final answer.

    NUL cannot occur in stored text, so distinct step lists always hash
    differently (["a\nb"] vs ["a", "b"]); \x01 marks a null.
    """
    parts = ["\x01" if steps is None else "\x00".join(steps), "\x01" if final_answer is None else final_answer]
    return text_sha256("\x02".join(parts))


class Split(models.TextChoices):
    TRAIN = "train", "train"
    # Held out from training to choose what training cannot (threshold, aggregation,
    # hyperparameters); see labeling.data.problem_splits.
    VALIDATION = "validation", "validation"
    TEST = "test", "test"
    UNSPECIFIED = "", "unspecified"


class Problem(models.Model):
    unique_id = models.CharField(max_length=255, unique=True)
    problem = models.TextField()
    # Indexed so the PRM800K importer can find a MATH problem it already has
    # by its text (the release carries no problem id).
    problem_sha256 = models.CharField(max_length=64, db_index=True, editable=False)
    # Nullable because the release has records whose reference fields are
    # null, and the round trip keeps nulls as nulls.
    solution = models.TextField(null=True, blank=True)
    answer = models.TextField(null=True, blank=True)
    subject = models.CharField(max_length=100, blank=True, default="")
    level = models.PositiveSmallIntegerField(null=True, blank=True)
    split = models.CharField(max_length=10, choices=Split.choices, blank=True, default=Split.UNSPECIFIED)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.unique_id


# Grading notes that leave Solution.is_correct null: graded, but neither right nor
# wrong. Written by activelearn.grading.service; the admin and dashboard count them.
GRADING_NO_ANSWER = "no answer found"  # the solution states no final answer
GRADING_NO_REFERENCE = "no reference answer"  # the problem has none to grade against


class SolutionQuerySet(models.QuerySet["Solution"]):
    def with_steps(self) -> SolutionQuerySet:
        """Solutions that have steps: every one but the placeholder of a phase-1 task."""
        return self.filter(steps__isnull=False)


class Solution(models.Model):
    """A model-written solution, split into steps, as served in phase 2.

    ``steps`` is null for the placeholder solution of a phase-1 task, whose
    steps are chosen during labeling rather than generated in advance.
    """

    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="solutions")
    steps = models.JSONField(null=True, blank=True)
    # content_sha256(steps, final_answer): the same content is one solution.
    content_sha256 = models.CharField(max_length=64, editable=False)
    final_answer = models.TextField(null=True, blank=True)
    source_model = models.CharField(max_length=200, blank=True, default="")
    # Provenance of a generated sample: what produced it (a sampling run, a dataset and
    # its version) and its id there (a conversation or sample id); "" when unknown, as
    # for PRM800K records. Not part of the PRM800K record format, so never exported.
    generator = models.CharField(max_length=200, blank=True, default="")
    source_key = models.CharField(max_length=255, blank=True, default="")
    # Null until graded; set by answer grading against Problem.answer. Also null with
    # grading_note "no answer found" (the solution states no final answer) or "no
    # reference answer": graded, but neither right nor wrong. "" means never graded.
    is_correct = models.BooleanField(null=True, blank=True)
    grading_note = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = SolutionQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        constraints = [
            # The same text for the same problem is one solution: re-importing a
            # pool, or the same solution seen in several generations, reuses it.
            models.UniqueConstraint(
                fields=["problem", "content_sha256", "source_model"], name="solution_unique_per_problem"
            ),
            # A source key names one sample of its generator: importing the same file
            # again finds it, and a different text under the same key is refused.
            models.UniqueConstraint(
                fields=["problem", "generator", "source_key"],
                condition=~Q(source_key=""),
                name="solution_source_key_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"solution {self.pk} of {self.problem_id}"

    @property
    def step_count(self) -> int:
        return len(self.steps or [])


class StepAlternative(models.Model):
    """An alternative candidate for one step of a solution (phase 2).

    Rated by the labeler at the step where they found the first error;
    ``ordinal`` starts at 1 because completion 0 is the solution's own step.
    """

    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="alternatives")
    step_index = models.PositiveIntegerField()
    ordinal = models.PositiveIntegerField()
    text = models.TextField()
    source_model = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["solution_id", "step_index", "ordinal"]
        constraints = [
            models.UniqueConstraint(
                fields=["solution", "step_index", "ordinal"], name="step_alternative_unique_ordinal"
            ),
            models.CheckConstraint(condition=Q(ordinal__gte=1), name="step_alternative_ordinal_after_original"),
        ]


class Phase(models.IntegerChoices):
    ONE = 1, "phase 1"
    TWO = 2, "phase 2"


class GenerationStatus(models.TextChoices):
    # Drawing its own pool from the generator (activelearn.generations.sampling).
    SAMPLING = "sampling", "sampling"
    REQUESTED = "requested", "requested"
    TRAINING = "training", "training"
    SCORING = "scoring", "scoring"
    GRADING = "grading", "grading"
    SELECTING = "selecting", "selecting"
    OPEN = "open", "open"
    CLOSED = "closed", "closed"
    FAILED = "failed", "failed"


RUNNING_GENERATION_STATUSES = [
    GenerationStatus.SAMPLING,
    GenerationStatus.REQUESTED,
    GenerationStatus.TRAINING,
    GenerationStatus.SCORING,
    GenerationStatus.GRADING,
    GenerationStatus.SELECTING,
]

SCREENING_GENERATION = -1


class Generation(models.Model):
    """One round of labeling.

    ``number`` is exported as the record's ``generation``: -1 is the screening
    set, 0.. are active-learning rounds, and null is phase-1 work.
    """

    number = models.IntegerField(null=True, blank=True, unique=True)
    phase = models.PositiveSmallIntegerField(choices=Phase.choices, default=Phase.TWO)
    status = models.CharField(max_length=20, choices=GenerationStatus.choices, default=GenerationStatus.OPEN)
    config = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["number"]
        constraints = [
            models.UniqueConstraint(
                fields=["phase"],
                condition=Q(number__isnull=True),
                name="generation_one_unnumbered_phase_1",
            ),
            models.CheckConstraint(
                condition=Q(number__isnull=True, phase=Phase.ONE) | Q(number__isnull=False),
                name="generation_only_phase_1_unnumbered",
            ),
            # The active-learning pipeline must never run two rounds at once;
            # they would select from the same pool and double-queue solutions.
            models.UniqueConstraint(
                fields=["phase"],
                condition=Q(status__in=RUNNING_GENERATION_STATUSES),
                name="generation_at_most_one_running",
            ),
        ]

    def __str__(self) -> str:
        return "phase 1" if self.number is None else f"generation {self.number}"


class LabelerStatus(models.TextChoices):
    SCREENING = "screening", "in screening"
    ACTIVE = "active", "active"
    FAILED_SCREENING = "failed_screening", "did not pass screening"
    SUSPENDED = "suspended", "suspended"


class Labeler(models.Model):
    # Null for labelers known only from an imported dataset.
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="labeler"
    )
    # Exported as ``labeler``: stable and anonymous, never a username.
    uuid = models.UUIDField(unique=True, default=uuid.uuid4, editable=False)
    status = models.CharField(max_length=20, choices=LabelerStatus.choices, default=LabelerStatus.SCREENING)
    status_reason = models.TextField(blank=True, default="")
    status_changed_at = models.DateTimeField(null=True, blank=True)
    # One switch that drops this person's labels from exports and training.
    exclude_labels = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # The rolling QC window last judged and passed, as a digest
    # (labeling.quality.control.labeler_quality_enforce): a hand-out whose
    # window is that one again needs no scoring. Empty: judge it next time
    # (gold_set empties it for everyone who had the solution).
    qc_window_passed = models.CharField(max_length=32, blank=True, default="", db_default="", editable=False)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return str(self.uuid)


class TaskKind(models.TextChoices):
    NORMAL = "normal", "normal"
    QUALITY_CONTROL = "quality_control", "quality control"
    SCREENING = "screening", "screening"


class TaskStatus(models.TextChoices):
    OPEN = "open", "open"
    DONE = "done", "done"
    RETIRED = "retired", "retired"


class SelectionReason(models.TextChoices):
    """Why a task was picked: what the selecting rule saw in it (exported beside the records)."""

    # activelearn.selection.select_convincing: high PRM score, by the graded final answer.
    CONVINCING_WRONG_ANSWER = "convincing_wrong_answer", "convincing wrong answer"
    CONVINCING_CORRECT = "convincing_correct", "convincing, correct answer"
    CONVINCING_UNGRADED = "convincing_ungraded", "convincing, answer not graded"
    # A uniform draw (phase-1 problems; activelearn.selection.select_uniform).
    UNIFORM = "uniform", "uniform draw"
    QUALITY_CONTROL = "quality_control", "gold QC item"
    SCREENING = "screening", "screening item"
    # Served elsewhere and loaded with its labels (the PRM800K release, the demo's CHAMP work).
    IMPORTED = "imported", "imported"
    # Made before the reason was recorded, or by code that does not say.
    UNRECORDED = "unrecorded", "not recorded"


class Task(models.Model):
    """A solution (or, in phase 1, a problem) served to labelers in a generation."""

    generation = models.ForeignKey(Generation, on_delete=models.PROTECT, related_name="tasks")
    # Phase-1 tasks point at their problem's placeholder solution (steps null).
    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="tasks")
    kind = models.CharField(max_length=20, choices=TaskKind.choices, default=TaskKind.NORMAL)
    # Exported as is_quality_control_question. Follows kind, except that a
    # screening item may also be a gold QC item in imported data.
    is_quality_control = models.BooleanField(default=False)
    # Distinguishes repeated serving of the same solution in one generation
    # (the release has a few); always 0 for tasks we create.
    serial = models.PositiveIntegerField(default=0)
    # Queue order: higher first. Set to the selecting PRM's convincingness.
    priority = models.FloatField(default=0.0)
    # Exported as pre_generated_verifier_score.
    verifier_score = models.FloatField(null=True, blank=True)
    labelers_needed = models.PositiveSmallIntegerField(default=1)
    # Phase-1 records of the release may omit pre_generated_* keys rather than
    # set them to null; the names omitted are kept (comma-separated) so that an
    # exported record has the same keys as the imported one.
    absent_question_keys = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(max_length=10, choices=TaskStatus.choices, default=TaskStatus.OPEN)
    # Not part of the PRM800K record; labeling.data.exports writes it to a file beside it.
    selection_reason = models.CharField(
        max_length=32,
        choices=SelectionReason.choices,
        default=SelectionReason.UNRECORDED,
        db_default=SelectionReason.UNRECORDED,
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["generation", "solution", "kind", "serial"], name="task_unique_per_generation"
            ),
            models.CheckConstraint(condition=Q(labelers_needed__gte=1), name="task_needs_a_labeler"),
            models.CheckConstraint(
                condition=~Q(kind=TaskKind.QUALITY_CONTROL) | Q(is_quality_control=True),
                name="task_qc_kind_is_flagged",
            ),
            models.CheckConstraint(
                condition=~Q(kind=TaskKind.NORMAL) | Q(is_quality_control=False),
                name="task_normal_kind_is_not_qc",
            ),
            # A bulk insert (COPY, raw SQL) cannot store a reason the admin and the export cannot name.
            models.CheckConstraint(
                condition=Q(selection_reason__in=SelectionReason.values), name="task_selection_reason_known"
            ),
        ]
        indexes = [
            # "next task": open tasks of a generation, best first.
            models.Index(fields=["generation", "status", "-priority", "id"], name="task_queue_idx"),
            # The screening set and the QC pool (labeling.work.queue): open gold
            # tasks of one kind, in serving order. Partial, so the large
            # normal queue does not pay for it.
            models.Index(
                fields=["kind", "status", "-priority", "id"],
                condition=~Q(kind=TaskKind.NORMAL),
                name="task_gold_kind_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"task {self.pk}"


class FinishReason(models.TextChoices):
    FOUND_ERROR = "found_error", "found an error"
    SOLUTION = "solution", "reached the solution"
    BAD_PROBLEM = "bad_problem", "bad problem"
    GIVE_UP = "give_up", "gave up"


class AssignmentStatus(models.TextChoices):
    IN_PROGRESS = "in_progress", "in progress"
    SUBMITTED = "submitted", "submitted"
    EXPIRED = "expired", "expired"


class Assignment(models.Model):
    """One labeler's work on one task: exported as one PRM800K record."""

    # No index of their own: assignment_one_per_task_and_labeler (task, labeler)
    # and assignment_labeler_status_idx (labeler, status) begin with them. Every
    # index of this table is written again whenever a row changes an indexed
    # column, a submit and a lease.
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="assignments", db_index=False)
    labeler = models.ForeignKey(Labeler, on_delete=models.PROTECT, related_name="assignments", db_index=False)
    status = models.CharField(max_length=20, choices=AssignmentStatus.choices, default=AssignmentStatus.IN_PROGRESS)
    started_at = models.DateTimeField(null=True, blank=True)
    last_activity_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Exported as ``timestamp``.
    submitted_at = models.DateTimeField(null=True, blank=True)
    # Exported as ``total_time`` (ms), measured on the server.
    total_time_ms = models.BigIntegerField(null=True, blank=True)
    finish_reason = models.CharField(max_length=20, choices=FinishReason.choices, null=True, blank=True)
    finish_reason_text = models.TextField(blank=True, default="")
    # The record's label.steps as JSON, frozen when the assignment is
    # submitted (it is read-only from then on). The LabeledStep/StepRating rows
    # stay the source of truth; this copy lets an export stream one row per
    # record instead of re-joining a million ratings.
    # Null for assignments submitted before it existed: exports rebuild those.
    label_steps_json = models.TextField(null=True, blank=True, editable=False)
    # The rating version of the latest request that deleted ratings (a step
    # changed to -1 or unrated drops the steps after it). A delayed request
    # older than that must not bring a deleted rating back by re-creating it.
    ratings_reset_version = models.PositiveIntegerField(default=0)
    # The state version: every change of the assignment (a rating, a flag,
    # ratings dropped, alternatives attached, the finish) adds one, and it is
    # never below any of its ratings' versions. The task page renders it and
    # every key press carries the version it was aimed at: a press is applied
    # only to the state the labeler saw (labeling.work.rating.presses_apply).
    version = models.PositiveIntegerField(default=0)
    # The task's kind (a task's kind never changes), copied here when the
    # assignment is made: every hand-out reads the labeler's rolling QC window
    # (labeling.quality.control), and assignment_qc_window_idx finds its items
    # among the labeler's own rows, newest first, without reading every
    # assignment they ever had. Set by Assignment.for_task.
    task_kind = models.CharField(max_length=20, choices=TaskKind.choices, editable=False)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["task", "labeler"], name="assignment_one_per_task_and_labeler"),
            models.CheckConstraint(
                condition=Q(status=AssignmentStatus.SUBMITTED, finish_reason__isnull=False)
                | ~Q(status=AssignmentStatus.SUBMITTED),
                name="assignment_submitted_has_finish_reason",
            ),
            models.CheckConstraint(
                condition=Q(total_time_ms__isnull=True) | Q(total_time_ms__gte=0),
                name="assignment_total_time_not_negative",
            ),
            # A writer that forgot the task's kind (a bulk insert skips save())
            # fails loudly instead of hiding a QC item from the rolling window.
            models.CheckConstraint(condition=Q(task_kind__in=TaskKind.values), name="assignment_task_kind_known"),
            # A labeler holds at most one lease: two "next task" requests from
            # the same person at the same moment (double click, two tabs) must
            # not both create an assignment. Also serves "my current task".
            models.UniqueConstraint(
                fields=["labeler"],
                condition=Q(status=AssignmentStatus.IN_PROGRESS),
                name="assignment_one_in_progress_per_labeler",
            ),
        ]
        indexes = [
            # A labeler's current lease and their history.
            models.Index(fields=["labeler", "status"], name="assignment_labeler_status_idx"),
            # No index on lease_expires_at: no query looks leases up by it (a
            # hand-out counts them per task), and every key press renews the
            # lease, which such an index would turn into a write to every
            # index of the table.
            # A labeler's rolling QC window (labeling.quality.control.ROLLING_WINDOW_IDS):
            # their finished QC items, newest first.
            models.Index(
                fields=["labeler", "-started_at", "-id"],
                condition=Q(
                    task_kind=TaskKind.QUALITY_CONTROL,
                    status__in=[AssignmentStatus.SUBMITTED, AssignmentStatus.EXPIRED],
                ),
                name="assignment_qc_window_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"assignment {self.pk}"

    @classmethod
    def for_task(cls, task: Task, **fields: Any) -> Assignment:
        """A new assignment of ``task`` (unsaved), carrying the task's kind.

        Every assignment the ORM makes is made here; the hand-out's lease statement
        (labeling.work.hotpath.ASSIGNMENT_LEASE) writes the same column in its SQL.
        """
        return cls(task=task, task_kind=task.kind, **fields)


class LabeledStep(models.Model):
    """One entry of ``label.steps``: a position in the labeled trajectory."""

    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="labeled_steps")
    index = models.PositiveIntegerField()
    # Index into the completions of the step the solution continued with;
    # null at the step where labeling stopped or when the human step was used.
    chosen_completion = models.PositiveIntegerField(null=True, blank=True)
    human_completion = models.TextField(null=True, blank=True)

    class Meta:
        ordering = ["assignment_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["assignment", "index"], name="labeled_step_unique_index"),
        ]


class StepRating(models.Model):
    """One completion of a labeled step and the rating it received."""

    step = models.ForeignKey(LabeledStep, on_delete=models.CASCADE, related_name="ratings")
    completion_index = models.PositiveIntegerField()
    text = models.TextField()
    rating = models.SmallIntegerField(null=True, blank=True)
    flagged = models.BooleanField(null=True, blank=True)
    # Monotonic per row: a request carrying an older version than the stored
    # one is stale and must not overwrite it.
    version = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["step_id", "completion_index"]
        constraints = [
            models.UniqueConstraint(fields=["step", "completion_index"], name="step_rating_one_per_completion"),
            models.CheckConstraint(
                condition=Q(rating__isnull=True) | Q(rating__in=[-1, 0, 1]),
                name="step_rating_is_minus_one_zero_or_one",
            ),
        ]


class GoldStep(models.Model):
    """Which ratings of one step of a gold solution are acceptable."""

    solution = models.ForeignKey(Solution, on_delete=models.CASCADE, related_name="gold_steps")
    step_index = models.PositiveIntegerField()
    negative_ok = models.BooleanField(default=False)
    neutral_ok = models.BooleanField(default=True)
    positive_ok = models.BooleanField(default=True)
    note = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["solution_id", "step_index"]
        constraints = [
            models.UniqueConstraint(fields=["solution", "step_index"], name="gold_step_unique"),
            models.CheckConstraint(
                condition=Q(negative_ok=True) | Q(neutral_ok=True) | Q(positive_ok=True),
                name="gold_step_allows_some_rating",
            ),
        ]


class ExportJobStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    DONE = "done", "done"
    FAILED = "failed", "failed"


class ExportFormat(models.TextChoices):
    PRM800K = "prm800k", "PRM800K JSONL"
    STEPWISE = "stepwise", "TRL stepwise JSONL"
    PARQUET = "parquet", "TRL stepwise Parquet"


class ExportJob(models.Model):
    """An export requested from the API or admin and run by a worker (labeling.data.exportjobs)."""

    status = models.CharField(max_length=10, choices=ExportJobStatus.choices, default=ExportJobStatus.QUEUED)
    format = models.CharField(max_length=10, choices=ExportFormat.choices, default=ExportFormat.PRM800K)
    # ExportFilters as a dict (plus "neutral" for stepwise formats).
    filters = models.JSONField(default=dict, blank=True)
    # Where the worker wrote the file, under settings.EXPORT_DIR.
    path = models.CharField(max_length=500, blank=True, default="")
    records = models.PositiveBigIntegerField(null=True, blank=True)
    sha256 = models.CharField(max_length=64, blank=True, default="")
    # Records written so far, and the number expected (counted when the run
    # starts): the status card's progress bar.
    progress = models.PositiveBigIntegerField(default=0)
    total = models.PositiveBigIntegerField(null=True, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="export_jobs"
    )
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(status=ExportJobStatus.DONE) | Q(records__isnull=False),
                name="export_job_done_has_records",
            ),
        ]

    def __str__(self) -> str:
        return f"export {self.pk} ({self.format}, {self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (ExportJobStatus.DONE, ExportJobStatus.FAILED)


class LabelerStatusEvent(models.Model):
    """One change of a labeler's status (labeling.labelers.labeler_set_status): the audit trail.

    Admission and failure after screening, automatic suspension and every admin
    override each leave one row, so "why is this person suspended, and since
    when" is answerable after later changes overwrote ``Labeler.status_reason``.
    """

    labeler = models.ForeignKey(Labeler, on_delete=models.CASCADE, related_name="status_events")
    from_status = models.CharField(max_length=20, choices=LabelerStatus.choices)
    to_status = models.CharField(max_length=20, choices=LabelerStatus.choices)
    reason = models.TextField(blank=True, default="")
    # Null for automatic changes (screening result, rolling quality).
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        indexes = [
            # A labeler's status history, newest first (admin page).
            models.Index(fields=["labeler", "-created_at"], name="labeler_status_event_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.labeler_id}: {self.from_status} -> {self.to_status}"


class CandidateSetStatus(models.TextChoices):
    PENDING = "pending", "pending"
    READY = "ready", "ready"
    FAILED = "failed", "failed"


class StepCandidateSet(models.Model):
    """The K candidate next steps a model proposed for one step of one assignment.

    Phase 1: the candidates the labeler rates at each step; phase 2: alternatives
    generated at the error step when the solution has none stored. Written by
    ``labeling.work.candidates.DatabaseCandidateStore`` only: pending when a
    prefetch claims the slot, then ready (texts) or failed (error). A ready set is
    never overwritten, so the texts a labeler rated are the texts stored here.
    """

    assignment = models.ForeignKey(Assignment, on_delete=models.CASCADE, related_name="candidate_sets")
    step_index = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=CandidateSetStatus.choices, default=CandidateSetStatus.PENDING)
    texts = models.JSONField(default=list, blank=True)
    # StepCandidates.as_dict() minus the texts: sampling settings and drop counts.
    sampling = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["assignment_id", "step_index"]
        constraints = [
            # One slot per (assignment, step): the claim is an upsert on this key,
            # so two prefetches of the same step queue one generation task. Also
            # serves the page's "candidates of this step" lookup.
            models.UniqueConstraint(fields=["assignment", "step_index"], name="step_candidate_set_one_per_step"),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "ready", "failed"]), name="step_candidate_set_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"candidates for assignment {self.assignment_id} step {self.step_index} ({self.status})"


class ApiTokenStamp(models.Model):
    """The password an API token was issued under (``labeling.api.authentication``).

    ``auth_hash`` is the user's ``get_session_auth_hash()`` when the token was issued
    (or first used, for a token made without one): an HMAC of the password hash, the
    same value a session stores. A token whose user's hash differs is revoked.
    """

    token = models.OneToOneField("authtoken.Token", on_delete=models.CASCADE, primary_key=True, related_name="stamp")
    auth_hash = models.CharField(max_length=128)
    created_at = models.DateTimeField(auto_now_add=True)
