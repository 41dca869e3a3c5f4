"""Selector: a generation's progress and, in words, every step that yielded nothing.

The admin's generation pages and the staff dashboard show the same sentences, so a
generation never reads as a silent "open" with no tasks: an empty pool, nothing graded
wrong, or everything already labeled is said plainly, with what to do about it.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from activelearn.models import GenerationRun
from labeling.models import Generation, GenerationStatus

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
    line = (
        f"step {step}; scored {run.scored}/{run.score_total}, graded {run.graded}/{run.grade_total}, "
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
