"""Selector: a generation's progress and, in words, every step that yielded nothing.

The admin's generation pages and the staff dashboard show the same sentences, so a
generation never reads as a silent "open" with no tasks: an empty pool, nothing graded
wrong, or everything already labeled is said plainly, with what to do about it.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Q
from django.utils import timezone

from activelearn.models import CheckpointStatus, GenerationRun, PRMCheckpoint, ScoreChunk
from labeling.models import GRADING_NO_ANSWER, Generation, GenerationStatus, Solution

_S = GenerationStatus


def _when(moment: datetime | None) -> str:
    return "—" if moment is None else timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")


def _took(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return ""
    seconds = max(0, round((end - start).total_seconds()))
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def generation_progress(*, generation: Generation, run: GenerationRun | None) -> str:
    """One line: the step, the counts, and when it opened (or failed) and how long it took."""
    if run is None:
        return ""
    status = generation.status
    step = status if status in (_S.OPEN, _S.CLOSED, _S.FAILED) else run.step or "-"
    sampled = f"sampled {run.sampled}/{run.sample_total}, " if run.sample_total else ""
    line = (
        f"step {step}; {sampled}scored {run.scored}/{run.score_total}, graded {run.graded}/{run.grade_total}, "
        f"selected {run.selected}, QC {run.qc_injected}"
    )
    finished = run.selecting_finished_at if status in (_S.OPEN, _S.CLOSED) else None
    if finished is not None:
        took = _took(generation.started_at, finished)
        line += f"; opened {_when(finished)}" + (f" after {took}" if took else "")
    return line


def generation_notes(*, generation: Generation, run: GenerationRun | None) -> list[str]:
    """Sentences for each step of an opened generation that yielded nothing or less than asked."""
    if run is None or generation.status not in (_S.OPEN, _S.CLOSED):
        if generation.status == _S.FAILED and generation.error:
            return [f"Failed: {generation.error}"]
        return []
    config = run.config or {}
    stats = run.selection_stats or {}
    k = int(config.get("k") or 0)
    per_problem = bool(config.get("per_problem"))
    wrong_share = float(config.get("wrong_share") or 0.0)
    notes: list[str] = []
    if run.score_total == 0:
        notes.append(
            "The pool was empty: every solution with steps is already a task in some generation, so there "
            "was nothing to score. Add solutions (manage.py import_solutions) and start another generation."
        )
        return notes
    candidates = int(stats.get("candidates", 0))
    wrong = int(stats.get("wrong_answer_candidates", 0))
    if candidates == 0:
        notes.append(
            f"Nothing to select: all {run.score_total} scored pool solutions were already labeled or served "
            "(by content) in an earlier generation."
        )
        return notes
    if wrong == 0:
        notes.append(
            f"Nothing in the pool was graded wrong ({candidates} candidates): there are no convincing wrong "
            "answers to select, so the picks are all from the rest of the pool. Check the problems' reference "
            "answers and grade_solutions."
        )
    if run.selected == 0:
        notes.append("No task was created: the selection picked nothing.")
    elif not per_problem and run.selected < k:
        notes.append(f"Selected {run.selected} of the {k} asked for: the pool had only {candidates} candidates.")
    picked_wrong = int(stats.get("picks_with_wrong_answer", 0))
    if run.selected and wrong and picked_wrong < wrong_share * run.selected:
        notes.append(
            f"{picked_wrong} of {run.selected} picks have a wrong answer, under the wrong-answer share of "
            f"{wrong_share:.0%}: the pool had only {wrong} solutions graded wrong."
        )
    return notes


def _fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "n/a"


def _left(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def training_line(*, checkpoint: PRMCheckpoint, trained_here: bool, now: datetime | None = None) -> str:
    """What the generation's checkpoint is: being trained (step, epoch, time left), trained, or reused."""
    name = f"checkpoint #{checkpoint.pk} (backbone {checkpoint.base_model})"
    if checkpoint.status == CheckpointStatus.TRAINING:
        done, total = checkpoint.steps_done, checkpoint.steps_total
        if total == 0 or done == 0:
            return f"Training {name}: building the training set and loading the backbone; no optimizer step yet."
        line = f"Training {name}: step {done} of {total}"
        train = checkpoint.hyperparameters.get("train") or {}
        epochs = train.get("num_epochs")
        if isinstance(epochs, int) and epochs > 0 and not train.get("max_steps"):
            per_epoch = total / epochs
            line += f", epoch {min(epochs, int(done // per_epoch) + 1)} of {epochs}"
        started = checkpoint.started_at or checkpoint.created_at
        elapsed = ((now or timezone.now()) - started).total_seconds()
        return line + f", about {_left(elapsed * (total - done) / done)} left."
    if checkpoint.status == CheckpointStatus.FAILED:
        return f"Training {name} failed: {checkpoint.error}"
    metrics = checkpoint.metrics or {}
    solutions = int(metrics.get("train_solutions") or 0) + int(metrics.get("validation_solutions") or 0)
    through = checkpoint.trained_through_generation
    seen = "" if through is None else f", labels through generation {through}"
    verb = "Trained" if trained_here else "Reused"
    return (
        f"{verb} {name} on {solutions} labelled solutions ({metrics.get('train_solutions', 0)} to train, "
        f"{metrics.get('validation_solutions', 0)} to validate; {metrics.get('labeled_steps_seen', 0)} labelled "
        f"steps seen, {metrics.get('epochs', 0)} epoch(s){seen}); validation step AUROC "
        f"{_fmt(metrics.get('val_auroc'))} (chance 0.5)."
    )


def pool_grades(*, run: GenerationRun) -> dict[str, int]:
    """The run's pool by graded final answer: correct, wrong, without an answer, other (no reference, not graded)."""
    totals = {"correct": 0, "wrong": 0, "no_answer": 0, "other": 0}
    for ids in ScoreChunk.objects.filter(run=run).values_list("solution_ids", flat=True):
        counts = Solution.objects.filter(pk__in=list(ids)).aggregate(
            correct=Count("pk", filter=Q(is_correct=True)),
            wrong=Count("pk", filter=Q(is_correct=False)),
            no_answer=Count("pk", filter=Q(is_correct__isnull=True, grading_note=GRADING_NO_ANSWER)),
            total=Count("pk"),
        )
        for key in ("correct", "wrong", "no_answer"):
            totals[key] += counts[key]
        totals["other"] += counts["total"] - counts["correct"] - counts["wrong"] - counts["no_answer"]
    return totals


def generation_summary(*, generation: Generation, run: GenerationRun | None) -> list[str]:
    """What the generation did, step by step, in sentences: what it trained (or is training), how
    its pool was graded, and how many picks have a wrong answer. For its admin page."""
    if run is None:
        return []
    lines = []
    if run.checkpoint is not None:
        lines.append(training_line(checkpoint=run.checkpoint, trained_here=run.training_started_at is not None))
    if run.score_total:
        lines.append(f"Scored {run.scored} of the pool's {run.score_total} solutions.")
    if run.grading_finished_at is not None or generation.status == _S.GRADING:
        grades = pool_grades(run=run)
        lines.append(
            f"Graded the pool: {grades['correct']} correct, {grades['wrong']} wrong, {grades['no_answer']} without "
            f"an answer, {grades['other']} without a reference answer or not graded."
        )
    if generation.status in (_S.OPEN, _S.CLOSED):
        stats = run.selection_stats or {}
        lines.append(
            f"Selected {run.selected}: {stats.get('picks_with_wrong_answer', 0)} with a wrong answer "
            f"({stats.get('wrong_answer_picks', 0)} as convincing wrong answers, "
            f"{stats.get('wrong_answer_picks_passing_threshold', 0)} of them passed by the checkpoint), "
            f"{stats.get('other_picks', 0)} from the rest; {run.qc_injected} QC items."
        )
    return lines
