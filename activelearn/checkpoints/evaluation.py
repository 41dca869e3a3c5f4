"""Service: evaluate a READY checkpoint on held-out data; stored in ``PRMCheckpoint.evaluation``.

Held-out data is one of:

* problems of given splits and/or given ``Problem.unique_id``s (``splits=``,
  ``problem_ids=``): their labeled solutions, and their unlabeled pool for best-of-N;
* one generation's labels (``generation=``) and the pool of that generation's problems;
* by default, the checkpoint's own validation set (its validation splits when it was
  trained with them, else the hash-held-out side of its training labels).

``PRMCheckpoint.evaluation`` maps a key per held-out set (``split:test``,
``generation:3``, ``validation``, ...) to the result below, so the validation and the
test numbers of one checkpoint sit side by side. Keys of a result:

* ``threshold`` (and ``threshold_source``): the checkpoint's, chosen on validation,
  unless one is given; 0.5 for a checkpoint that has none. ``threshold_decay``: how far
  it falls along a solution (the checkpoint's, in its logits per log(1 + step index);
  ``prm.evaluation.decayed_scores``), applied to a given threshold too.
* ``aggregation``: the checkpoint's chosen aggregation ("min" when it has none).
* ``step_auroc``: AUROC of P(step is fine) against the human ratings of every rated
  completion (neutral counted as fine), with ``step_auroc_labeled_steps``; chance is 0.5.
  Null when the held-out labels are all of one class.
* ``objective``: "process" (a PRM) or "outcome" (an ORM: trained on graded final answers;
  its best-of-N score is its final step's, and its step AUROC and first error, which read
  its score after each step, come with ``step_metrics_note``; null for a PRM).
* ``first_error``: ProcessBench style on each labeled solution's trajectory (the chosen
  completions, then the step where the labeler stopped): ``error_accuracy`` (first error
  found exactly), ``correct_accuracy`` (error-free solution passed), their harmonic mean
  ``f1`` with ``f1_ci`` (95 % bootstrap over solutions), ``f1_minus_random_at_prior``
  (+ ``_ci``, paired) and counts; ``first_error_baselines``: ``always_no_error`` and
  ``random_at_prior`` (each step flagged with the share of -1 steps, ``error_prior``).
* ``best_of_n``: per N (string keys), over held-out problems with at least N pool
  solutions; the pool is every solution of those problems that was never served as a
  task (nor has the content of one), scored by this checkpoint and graded. Per N:
  ``problems`` used and ``skipped`` (fewer than N), and expected accuracies over every
  size-N subset of a problem's pool: ``prm`` (highest score under the checkpoint's
  aggregation), ``prm_min``, ``prm_product``, ``prm_mean``, ``prm_last``, ``random``,
  ``oracle`` (some candidate right), all exact; ``weighted`` (answer with the largest
  summed score) and ``majority``, over ``draws`` random subsets per problem, the same for
  both, or every subset where there are fewer (``votes_exact`` problems). Answers vote as
  the grader groups them (``grading.equivalence``); a tie shares the credit. Each
  accuracy ``k`` has ``k_ci``, and each but majority ``k_minus_majority`` and
  ``k_minus_majority_ci``: 95 % intervals from resampling problems (``intervals``).
  ``pool`` counts what was used and what was left out, and why, and how the wrong
  answers were grouped.
* ``held_out_problems`` and ``held_out_problems_in_training``: a non-zero overlap means
  the numbers are not held-out numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from activelearn.checkpoints.runs import (
    checkpoint_aggregation,
    checkpoint_threshold,
    checkpoint_threshold_decay,
    checkpoint_training_set,
)
from activelearn.checkpoints.scoring import checkpoint_model_load
from activelearn.checkpoints.training_data import TrainingDataFilters, labeled_solutions_list
from activelearn.grading import extract_final_answer, normalize_answer
from activelearn.grading.equivalence import answer_groups
from activelearn.models import CheckpointObjective, PRMCheckpoint, SolutionScore
from labeling.models import Solution, Task

if TYPE_CHECKING:
    from activelearn.prm.data import LabeledSolution
    from activelearn.prm.evaluation import Candidate

DEFAULT_BEST_OF_N = (1, 4, 16)
# An ORM is evaluated like a PRM (its best-of-N score is its final step's, through
# checkpoint_aggregation); its step metrics are reported with this note beside them.
ORM_STEP_METRICS_NOTE = (
    "outcome-supervised: step AUROC and first error read its score after each step, "
    "which it was trained to give only at the final step"
)


class EvaluationRequestError(ValueError):
    """The held-out selection is unusable; the message says why."""


@dataclasses.dataclass(frozen=True)
class HeldOut:
    key: str  # the key of PRMCheckpoint.evaluation
    labeled: list[LabeledSolution]
    # Q on Solution selecting the held-out problems' solutions (the best-of-N pool).
    pool: Q


def held_out_select(
    *,
    checkpoint: PRMCheckpoint,
    generation: int | None = None,
    splits: Sequence[str] | None = None,
    problem_ids: Sequence[str] | None = None,
) -> HeldOut:
    """The labeled solutions and the pool that an evaluation of ``checkpoint`` reads."""
    from activelearn.prm.data import is_validation_problem

    if generation is not None and (splits or problem_ids):
        raise EvaluationRequestError("give either a generation or splits/problems, not both")
    if splits or problem_ids:
        filters = TrainingDataFilters(
            splits=tuple(splits) if splits else None, problem_ids=tuple(problem_ids) if problem_ids else None
        )
        pool = Q()
        if splits:
            pool &= Q(problem__split__in=splits)
        if problem_ids:
            pool &= Q(problem__unique_id__in=problem_ids)
        parts = [f"split:{'+'.join(splits)}" if splits else "", f"problems:{len(problem_ids)}" if problem_ids else ""]
        return HeldOut(key=",".join(p for p in parts if p), labeled=labeled_solutions_list(filters=filters), pool=pool)
    if generation is not None:
        problems = Task.objects.filter(generation__number=generation).values("solution__problem_id")
        return HeldOut(
            key=f"generation:{generation}",
            labeled=labeled_solutions_list(filters=TrainingDataFilters(generations=(generation,))),
            pool=Q(problem_id__in=problems),
        )
    training_set = checkpoint_training_set(checkpoint=checkpoint, selection_pool=False)
    validation = checkpoint.hyperparameters.get("validation_data")
    if validation is not None:
        filters = TrainingDataFilters.from_json(validation)
        pool = Q()
        if filters.splits is not None:
            pool &= Q(problem__split__in=filters.splits)
        if filters.problem_ids is not None:
            pool &= Q(problem__unique_id__in=filters.problem_ids)
        return HeldOut(key="validation", labeled=training_set.validation, pool=pool)
    options = checkpoint.hyperparameters.get("train", {})
    fraction = float(options.get("val_fraction", 0.1))
    salt = str(options.get("split_salt", "prm-split"))
    problems_seen = Solution.objects.values_list("problem__unique_id", flat=True).distinct()
    held = [uid for uid in problems_seen if is_validation_problem(uid, fraction, salt)]
    return HeldOut(key="validation", labeled=training_set.validation, pool=Q(problem__unique_id__in=held))


def checkpoint_evaluate(
    *,
    checkpoint: PRMCheckpoint,
    generation: int | None = None,
    splits: Sequence[str] | None = None,
    problem_ids: Sequence[str] | None = None,
    best_of_n_sizes: Sequence[int] = DEFAULT_BEST_OF_N,
    draws: int | None = None,
    resamples: int | None = None,
    threshold: float | None = None,
    seed: int = 0,
    batch_size: int = 16,
) -> dict[str, Any]:
    """Compute the metrics, store them under their held-out key (with ``evaluated_at``)
    and return them. The model is loaded once. ``draws``: random subsets per problem for
    the votes (default ``DEFAULT_DRAWS``); ``resamples``: bootstrap resamples behind every
    interval (default ``DEFAULT_RESAMPLES``)."""
    from activelearn.prm.data import trajectory_with_first_error
    from activelearn.prm.evaluation import (
        DEFAULT_DRAWS,
        DEFAULT_RESAMPLES,
        INTERVAL_LEVEL,
        auroc,
        decayed_scores,
        error_prior,
        first_error_baselines,
        first_error_interval,
        first_error_metrics,
        labeled_step_auroc,
    )
    from activelearn.prm.scoring import score_solutions

    if any(n < 1 for n in best_of_n_sizes):
        raise EvaluationRequestError("best-of-N sizes must be positive")
    draws = DEFAULT_DRAWS if draws is None else draws
    resamples = DEFAULT_RESAMPLES if resamples is None else resamples
    if draws < 1 or resamples < 1:
        raise EvaluationRequestError("draws and resamples must be positive")
    held_out = held_out_select(checkpoint=checkpoint, generation=generation, splits=splits, problem_ids=problem_ids)
    used_threshold = checkpoint_threshold(checkpoint=checkpoint) if threshold is None else threshold
    decay = checkpoint_threshold_decay(checkpoint=checkpoint)
    aggregation = checkpoint_aggregation(checkpoint=checkpoint)
    training_set = checkpoint_training_set(checkpoint=checkpoint, selection_pool=False)
    # Graded solutions trained on (an ORM's data, or a PRM's extra labels) count too.
    trained_on = {s.problem_id for s in training_set.train} | {s.problem_id for s in training_set.outcome_train}
    held_problems = {s.problem_id for s in held_out.labeled}
    result: dict[str, Any] = {
        "held_out": held_out.key,
        "generation": generation,
        "labeled_solutions": len(held_out.labeled),
        "held_out_problems": len(held_problems),
        "held_out_problems_in_training": len(held_problems & trained_on),
        "threshold": used_threshold,
        "threshold_source": "given"
        if threshold is not None
        else "checkpoint (chosen on validation)"
        if checkpoint.threshold is not None
        else "default",
        "threshold_decay": decay,
        "aggregation": aggregation,
        "objective": checkpoint.objective,
        "step_metrics_note": ORM_STEP_METRICS_NOTE if checkpoint.objective == CheckpointObjective.OUTCOME else None,
        "intervals": {
            "level": INTERVAL_LEVEL,
            "resamples": resamples,
            "seed": seed,
            "first_error": "solutions resampled",
            "best_of_n": "problems resampled",
        },
        "step_auroc": None,
        "step_auroc_labeled_steps": 0,
        "first_error": None,
        "first_error_baselines": None,
        "error_prior": None,
        "best_of_n": {},
        "pool": {},
    }
    if held_out.labeled:
        model, tokenizer = checkpoint_model_load(checkpoint=checkpoint)
        trajectories = [trajectory_with_first_error(solution) for solution in held_out.labeled]
        scored = score_solutions(
            model,
            tokenizer,
            [(solution.problem, steps) for solution, (steps, _) in zip(held_out.labeled, trajectories, strict=True)],
            batch_size=batch_size,
            reduction="min",
        )
        first_errors = [first for _, first in trajectories]
        # The first-error rule reads the scores against its falling threshold.
        flagged = decayed_scores([s.step_scores for s in scored], decay)
        metrics = first_error_metrics(flagged, first_errors, threshold=used_threshold)
        prior = error_prior([len(steps) for steps, _ in trajectories], first_errors)
        interval = first_error_interval(flagged, first_errors, used_threshold, prior, resamples=resamples, seed=seed)
        result["first_error"] = {
            **dataclasses.asdict(metrics),
            "f1_ci": [interval["f1"].low, interval["f1"].high],
            "f1_minus_random_at_prior": interval["f1_minus_random_at_prior"].value,
            "f1_minus_random_at_prior_ci": [
                interval["f1_minus_random_at_prior"].low,
                interval["f1_minus_random_at_prior"].high,
            ],
        }
        result["error_prior"] = prior
        result["first_error_baselines"] = {
            name: dataclasses.asdict(value)
            for name, value in first_error_baselines(
                [len(steps) for steps, _ in trajectories], first_errors, prior
            ).items()
        }
        if all(len(step.completions) == 1 for solution in held_out.labeled for step in solution.steps):
            # No alternatives: the rated completions are exactly the trajectory steps just
            # scored, so the AUROC needs no second pass over the same sequences.
            ratings = [
                step.completions[0].rating
                for solution, (steps, _) in zip(held_out.labeled, trajectories, strict=True)
                for step in solution.steps[: len(steps)]
            ]
            values = [score for s in scored for score in s.step_scores]
            fine = [rating != -1 for rating in ratings]  # neutral counts as fine
            if 0 < sum(fine) < len(fine):
                result["step_auroc"] = auroc(values, fine)
                result["step_auroc_labeled_steps"] = len(fine)
        else:
            try:
                report = labeled_step_auroc(
                    model, tokenizer, held_out.labeled, neutral="positive", batch_size=batch_size
                )
            except ValueError:
                pass  # all held-out labels of one class: AUROC is undefined, stays null
            else:
                result["step_auroc"] = report.auroc
                result["step_auroc_labeled_steps"] = report.labeled_steps

    pools, result["pool"] = _pool_candidates(checkpoint, held_out.pool, aggregation)
    for n in best_of_n_sizes:
        result["best_of_n"][str(n)] = _best_of_n_row(pools, n, draws=draws, resamples=resamples, seed=seed)
    with transaction.atomic():
        # Row lock: two evaluations of the same checkpoint (validation and test) each
        # add their key without losing the other's.
        stored = PRMCheckpoint.objects.select_for_update().get(pk=checkpoint.pk)
        evaluation = {**(stored.evaluation or {}), held_out.key: result}
        PRMCheckpoint.objects.filter(pk=checkpoint.pk).update(evaluation=evaluation, evaluated_at=timezone.now())
    checkpoint.evaluation = evaluation
    return result


def _best_of_n_row(
    pools: Sequence[Sequence[Candidate]], n: int, *, draws: int, resamples: int, seed: int
) -> dict[str, Any]:
    from activelearn.prm.evaluation import best_of_n
    from activelearn.prm.scoring import REDUCTIONS

    outcome = best_of_n(pools, n, draws=draws, seed=seed, aggregations=REDUCTIONS, resamples=resamples)

    def number(value: float | None) -> float | None:
        return None if value is None or math.isnan(value) else value

    row: dict[str, Any] = {"problems": outcome.problems, "skipped": outcome.skipped, "draws": draws}
    row["votes_exact"] = outcome.votes_exact
    names = ["prm", "weighted", "majority", "random", "oracle", *(f"prm_{name}" for name in REDUCTIONS)]
    for name in names:
        estimate = outcome.estimates.get(name)
        row[name] = number(estimate.value) if estimate is not None else None
        row[f"{name}_ci"] = [estimate.low, estimate.high] if estimate is not None else None
        if name != "majority":
            gap = outcome.minus_majority.get(name)
            row[f"{name}_minus_majority"] = gap.value if gap is not None else None
            row[f"{name}_minus_majority_ci"] = [gap.low, gap.high] if gap is not None else None
    return row


def _pool_candidates(
    checkpoint: PRMCheckpoint, pool: Q, aggregation: str
) -> tuple[list[list[Candidate]], dict[str, int]]:
    """The unlabeled pool of the held-out problems, scored by this checkpoint and graded.

    A solution that is or was a task (in any generation), or has the same content as one
    of its problem's tasks, is a labeled copy and stays out: best-of-N measures choosing
    among solutions nobody has labeled. Everything left out is counted.
    """
    from activelearn.prm.evaluation import Candidate
    from activelearn.prm.scoring import reduce_steps

    served = Task.objects.filter(
        solution__problem_id=OuterRef("problem_id"), solution__content_sha256=OuterRef("content_sha256")
    )
    solutions = Solution.objects.with_steps().filter(pool)
    labeled_copies = solutions.filter(Exists(served)).count()
    unlabeled = solutions.exclude(Exists(served))
    scored = SolutionScore.objects.filter(checkpoint=checkpoint, solution_id=OuterRef("pk"))
    counts = {
        "labeled_copies_left_out": labeled_copies,
        "unscored_left_out": unlabeled.exclude(Exists(scored)).count(),
        "ungraded_left_out": unlabeled.filter(Exists(scored), is_correct__isnull=True).count(),
    }
    rows = (
        SolutionScore.objects.filter(
            checkpoint=checkpoint, solution__in=unlabeled.filter(is_correct__isnull=False).values("pk")
        )
        .order_by("solution_id")
        .values_list(
            "solution__problem__unique_id",
            "step_scores",
            "solution__final_answer",
            "solution__steps",
            "solution__is_correct",
        )
    )
    # (answer as written, graded correct, aggregated score, step scores) per problem.
    found: dict[str, list[tuple[str, bool, float, tuple[float, ...]]]] = {}
    for unique_id, step_scores, final_answer, steps, is_correct in rows.iterator(chunk_size=2000):
        values = tuple(float(s) for s in step_scores or ())
        if not values:
            continue
        answer = final_answer if final_answer is not None else extract_final_answer("\n".join(steps or []))
        score = reduce_steps(values, aggregation)  # type: ignore[arg-type]
        found.setdefault(unique_id, []).append((answer or "", bool(is_correct), score, values))
    # Majority and weighted vote count answers as the grader compares them, so "1/3" and
    # "\frac{1}{3}" are one vote each for the same answer.
    groups, grouping = answer_groups([[(a, c) for a, c, _, _ in items] for items in found.values()])
    pools = [
        [
            Candidate(score=score, answer=normalize_answer(answer), is_correct=correct, step_scores=values, group=key)
            for (answer, correct, score, values), key in zip(items, keys, strict=True)
        ]
        for items, keys in zip(found.values(), groups, strict=True)
    ]
    counts["solutions_used"] = sum(len(items) for items in found.values())
    counts["problems_with_candidates"] = len(found)
    counts["wrong_answer_strings"] = grouping.distinct_wrong_answers
    counts["wrong_answer_groups"] = sum(len({c.vote_key for c in pool if not c.is_correct}) for pool in pools)
    counts["grouping_comparisons"] = grouping.comparisons
    counts["grouping_undecided"] = grouping.undecided
    return pools, counts
