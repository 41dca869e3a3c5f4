"""Service: evaluate a READY checkpoint on held-out data; stored in ``PRMCheckpoint.evaluation``.

Held-out data is either the validation side of the checkpoint's own train/validation
split (the default: same filters, fraction and salt, so it is exactly what training did
not see) or every labeled solution of one generation. Metrics (keys of the stored JSON):

* ``step_auroc``: AUROC of P(step is fine) against the human ratings of every rated
  completion, chosen path and alternatives (neutral counted as fine;
  ``activelearn.prm.evaluation.labeled_step_auroc``), ``step_auroc_labeled_steps`` how
  many; null when the held-out labels are all of one class.
* ``first_error``: ProcessBench style. Each labeled solution's human trajectory (the chosen
  completions, then the step where the labeler stopped, as shown) is scored; the
  predicted first error is the first step with P(fine) < ``threshold``; the true one is
  the first step rated -1 (none: an error-free solution). ``error_accuracy``,
  ``correct_accuracy``, their harmonic mean ``f1``, and counts.
* ``best_of_n``: per N (string keys), over held-out problems that have at least N solutions
  both scored by this checkpoint and graded: ``trials`` random size-N subsets per problem;
  ``prm_accuracy`` (highest score's answer is correct), ``majority_accuracy`` (most
  frequent normalised answer), ``weighted_accuracy`` (answer with the largest summed
  score), and ``problems``. Sizes with no eligible problem are left out. Uses stored
  ``SolutionScore`` rows, so score the pool first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from activelearn.checkpoints import checkpoint_training_set
from activelearn.grading import extract_final_answer, normalize_answer
from activelearn.models import PRMCheckpoint, SolutionScore
from activelearn.solution_scoring import checkpoint_model_load
from activelearn.training_data import TrainingDataFilters, labeled_solutions_list
from labeling.models import Task

if TYPE_CHECKING:
    from activelearn.prm.data import LabeledSolution
    from activelearn.prm.evaluation import Candidate

DEFAULT_BEST_OF_N = (1, 4, 16)


def trajectory_with_first_error(solution: LabeledSolution) -> tuple[list[str], int | None]:
    """The steps a labeler walked through and the index of the first one rated -1."""
    steps: list[str] = []
    first_error: int | None = None
    for step in solution.steps:
        completion = step.completions[step.chosen if step.chosen is not None else 0]
        if completion.rating == -1 and first_error is None:
            first_error = len(steps)
        steps.append(completion.text)
        if step.chosen is None:
            break
    return steps, first_error


def checkpoint_evaluate(
    *,
    checkpoint: PRMCheckpoint,
    generation: int | None = None,
    best_of_n_sizes: Sequence[int] = DEFAULT_BEST_OF_N,
    trials: int = 10,
    threshold: float = 0.5,
    seed: int = 0,
    batch_size: int = 16,
) -> dict[str, Any]:
    """Compute the metrics, store them on the row (with ``evaluated_at``) and return them."""
    from activelearn.prm.data import is_validation_problem
    from activelearn.prm.evaluation import best_of_n, first_error_metrics, labeled_step_auroc
    from activelearn.prm.scoring import score_solutions

    model, tokenizer = checkpoint_model_load(checkpoint=checkpoint)
    train_options = checkpoint.hyperparameters.get("train", {})
    if generation is None:
        held_out = checkpoint_training_set(checkpoint=checkpoint).validation
    else:
        held_out = labeled_solutions_list(filters=TrainingDataFilters(generations=(generation,)))

    result: dict[str, Any] = {
        "held_out": "validation_split" if generation is None else "generation",
        "generation": generation,
        "labeled_solutions": len(held_out),
        "threshold": threshold,
        "step_auroc": None,
        "step_auroc_labeled_steps": 0,
        "first_error": None,
        "best_of_n": {},
    }
    if held_out:
        trajectories = [trajectory_with_first_error(solution) for solution in held_out]
        scored = score_solutions(
            model,
            tokenizer,
            [(solution.problem, steps) for solution, (steps, _) in zip(held_out, trajectories, strict=True)],
            batch_size=batch_size,
            reduction="min",
        )
        metrics = first_error_metrics(
            [s.step_scores for s in scored], [first for _, first in trajectories], threshold=threshold
        )
        result["first_error"] = dataclasses.asdict(metrics)
        try:
            report = labeled_step_auroc(model, tokenizer, held_out, neutral="positive", batch_size=batch_size)
        except ValueError:
            pass  # all held-out labels of one class: AUROC is undefined, stays null
        else:
            result["step_auroc"] = report.auroc
            result["step_auroc_labeled_steps"] = report.labeled_steps

    if generation is None:
        fraction = float(train_options.get("val_fraction", 0.1))
        salt = str(train_options.get("split_salt", "prm-split"))
        candidates = _candidates(checkpoint, None)
        pools = [pool for unique_id, pool in candidates.items() if is_validation_problem(unique_id, fraction, salt)]
    else:
        pools = list(_candidates(checkpoint, generation).values())
    for n in best_of_n_sizes:
        eligible = [pool for pool in pools if len(pool) >= n]
        if not eligible:
            continue
        outcome = best_of_n(eligible, n, trials=trials, seed=seed)
        result["best_of_n"][str(n)] = {
            "problems": len(eligible),
            "trials": outcome.trials,
            "prm_accuracy": outcome.prm_accuracy,
            "majority_accuracy": outcome.majority_accuracy,
            "weighted_accuracy": outcome.weighted_accuracy,
        }
    PRMCheckpoint.objects.filter(pk=checkpoint.pk).update(evaluation=result, evaluated_at=timezone.now())
    checkpoint.evaluation = result
    return result


def _candidates(checkpoint: PRMCheckpoint, generation: int | None) -> dict[str, list[Candidate]]:
    """Scored and graded solutions by problem unique_id (optionally: problems of a generation)."""
    from activelearn.prm.evaluation import Candidate

    rows = SolutionScore.objects.filter(checkpoint=checkpoint, solution__is_correct__isnull=False)
    if generation is not None:
        problem_ids = Task.objects.filter(generation__number=generation).values("solution__problem_id")
        rows = rows.filter(solution__problem_id__in=problem_ids)
    pools: dict[str, list[Candidate]] = {}
    for unique_id, score, final_answer, steps, is_correct in (
        rows.order_by("solution_id")
        .values_list(
            "solution__problem__unique_id", "score", "solution__final_answer", "solution__steps", "solution__is_correct"
        )
        .iterator(chunk_size=2000)
    ):
        answer = final_answer if final_answer is not None else extract_final_answer("\n".join(steps or []))
        pools.setdefault(unique_id, []).append(
            Candidate(score=score, answer=normalize_answer(answer or ""), is_correct=bool(is_correct))
        )
    return pools
