"""Which reading of a step carries the signal: step AUROC and first-error F1 on CHAMP, per reader, over split seeds.

The PRM's head reads the backbone's hidden state at each step's separator, the solution
read causally from the problem on (``causal``). This benchmark asks what other readings
of the same labeled steps would give the same head, before any of them is built into the
product:

* ``causal``: what the product's PRM reads (``ProcessRewardModel.head_vectors``) with
  ``--backbone``;
* ``step_text``: the step's text alone, read by the same backbone as the PRM loads it (an
  encoder made causal, ``backbones.load_backbone``) and mean-pooled over its tokens;
* ``step_in_problem``: the step read together with the problem (``problem [SEP] step``),
  mean-pooled over the step's tokens;
* ``position``: the step's index and the solution's length, no text at all (a baseline);
* ``lm``: what the product's PRM reads with a causal LM (``--lm``, ``builtin:smollm2`` by
  default) and the ``surprise`` step feature: the last layer's hidden state at the
  separator and the LM's surprise at the step's tokens;
* ``lm_layerK``: the LM's layer K at the separator (K = 0 is the embeddings); ``lm_spanK``:
  layer K mean-pooled over the step's tokens; ``lm_surprise``: the surprise alone. One pass
  of the LM gives every one of them, for about a tenth of its layers and the middle and
  last ones (17-18 CPU-minutes for CHAMP's labels with SmolLM2 on 2 cores).

Each combination (``--combos causal+step_text,...``) gets a logistic regression on the
training problems' labeled steps, features standardised, classes balanced, its strength
chosen by the best validation step AUROC; the first-error threshold is the error-prior
quantile of the validation steps (``evaluation.prior_threshold``), as the product's (the
report adds F1 at another level: the quantile level, from 0.5 to 3 times the prior, that
maximises F1 on out-of-fold scores over the training and validation problems, five folds
by problem, applied to the validation steps). The
splits are the product's (``problem_split_for``, 0.6 / 0.2 / 0.2 of the problems), the
labels CHAMP's 534 first-wrong-step annotations. A reader's features are computed once and
kept in ``--cache`` (keyed by reader and backbone).

    python benchmarks/prm_readers.py --seeds 0 1 2 3 4
    python benchmarks/prm_readers.py --lm-depth 16 --readers lm_layer15,lm_span15 --combos lm_layer15+lm_span15 \
        --pool-positives 1 2 4 6     # correct-answer pool solutions' steps as extra fine labels
    python benchmarks/prm_readers.py --readers causal,step_text,position,lm \
        --combos causal,step_text,causal+step_text+position,lm,causal+step_text+lm
    python benchmarks/prm_readers.py --lm-depth 16 --readers lm_layer15,lm_span15 --combos lm_layer15+lm_span15 \
        --seeds 0 1 2 3 4 5 6 7 --threshold-decays 0 0.05 0.1 0.15 0.2 0.3   # a threshold falling along a solution

``--threshold-decays`` reports first-error F1 on validation and test with the product's
falling threshold (``evaluation.decayed_scores``; the decay in standard deviations of the
validation steps' logits, as ``TrainConfig.threshold_decay``), the threshold the prior
quantile of the decayed validation scores: the table the recipe's decay is chosen from,
by validation F1 alone. Beside it, the F1 a threshold chosen on the test split itself would
reach (``evaluation.best_threshold``): a bound no threshold rule chosen beforehand can beat
on those scores, not a result.

Not a training recipe: the regression is a stand-in for the product's head (on the
``causal`` reader the two agree within 0.02 of test step AUROC on split seeds 0-2).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
READERS = ("causal", "step_text", "step_in_problem", "position", "lm")
LM_READER = re.compile(r"lm_(layer|span)(\d+)|lm_surprise")
STRENGTHS = (0.001, 0.003, 0.01, 0.03, 0.1)


@dataclass(frozen=True)
class Steps:
    """CHAMP's labeled steps, one row each, in solution order (every trajectory ends at its first error)."""

    problem_ids: list[str]
    problems: list[str]
    texts: list[str]
    index: np.ndarray  # the step's 0-based index in its solution
    length: np.ndarray  # the whole solution's number of steps
    fine: np.ndarray  # True: not the first wrong step
    solutions: list[Any]  # LabeledSolution, for the product's readers


@functools.cache
def _champ(limit_problems: int | None) -> list[Any]:
    """CHAMP's problems (the first ``limit_problems``; None: all) with every solution and annotation
    (``read_champ``), read once a process (about 12 CPU-s for all)."""
    from labeling.data.demo import read_champ

    return read_champ(solutions_per_problem=None, limit_problems=limit_problems)


def champ_steps(limit_problems: int | None = None) -> Steps:
    from activelearn.prm.data import LabeledSolution, LabeledStep, RatedCompletion

    problem_ids, problems, texts, index, length, fine, solutions = [], [], [], [], [], [], []
    for problem in _champ(limit_problems or None):
        for annotation in problem.annotations:
            steps = []
            for i, text in enumerate(annotation.steps):
                wrong = i == annotation.first_wrong
                steps.append(LabeledStep((RatedCompletion(text, -1 if wrong else 1),), chosen=None if wrong else 0))
                problem_ids.append(problem.unique_id)
                problems.append(problem.problem)
                texts.append(text)
                index.append(i)
                length.append(len(annotation.steps))
                fine.append(not wrong)
                if wrong:
                    break
            solutions.append(LabeledSolution(problem.unique_id, problem.problem, tuple(steps), tuple(annotation.steps)))
    return Steps(problem_ids, problems, texts, np.array(index), np.array(length), np.array(fine), solutions)


# --- the readers --------------------------------------------------------------------
def _head_vectors(backbone: str, steps: Steps) -> np.ndarray:
    import torch

    from activelearn.prm.batching import encode_examples
    from activelearn.prm.data import build_examples
    from activelearn.prm.head_training import separator_features
    from activelearn.prm.modeling import NEGATIVE, ProcessRewardModel

    model, tokenizer = ProcessRewardModel.from_backbone(backbone)
    model.eval()
    encoder = model.step_encoder(tokenizer)
    with torch.no_grad():
        features = separator_features(
            model, encode_examples(encoder, build_examples(steps.solutions)), encoder.pad_id, torch.device("cpu")
        )
    if not np.array_equal((features.classes != NEGATIVE).numpy(), steps.fine):
        raise RuntimeError(f"{backbone}: the separators read are not the labeled steps")
    return features.vectors.float().numpy()


def _pooled(backbone: str, firsts: list[str], seconds: list[str] | None, max_length: int) -> np.ndarray:
    """Mean-pooled last hidden state of each text (of the second text's tokens, for pairs)."""
    import torch

    from activelearn.prm.backbones import load_backbone

    loaded = load_backbone(backbone)
    model, tokenizer = loaded.model, loaded.tokenizer
    model.train(False)
    vectors = []
    with torch.no_grad():
        for start in range(0, len(firsts), 32):
            batch = tokenizer(
                firsts[start : start + 32], seconds[start : start + 32] if seconds else None, padding=True,
                truncation="longest_first", max_length=max_length, return_tensors="pt",
            )  # fmt: skip
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"]
            if seconds:
                mask = mask * batch["token_type_ids"]
            weights = mask[..., None].float()
            vectors.append(((hidden * weights).sum(1) / weights.sum(1).clamp(min=1)).numpy())
    return np.concatenate(vectors)


def lm_layers(count: int) -> tuple[list[int], list[int]]:
    """The layers whose separator state is kept (about a tenth of them, the middle and the last; 0: the
    embeddings) and those pooled over the step's tokens (the middle and the last)."""
    every = max(1, count // 10)
    return sorted({*range(every, count + 1, every), count // 2, count}), sorted({count // 2, count})


def _lm_readings(lm: str, steps: Steps, depth: int | None = None) -> dict[str, np.ndarray]:
    """Every ``lm_*`` reading from one pass of the LM over each labeled solution.

    With ``depth``, the pass runs the LM's first ``depth`` layers only (what a PRM reading a
    lower layer would pay): the readings of the layers below it, unchanged, and no surprise
    (it needs the last layer)."""
    import torch

    from activelearn.prm.batching import encode_examples, pad_batch
    from activelearn.prm.data import build_examples
    from activelearn.prm.modeling import ProcessRewardModel

    model, tokenizer = ProcessRewardModel.from_backbone(lm, step_features=["surprise"])
    model.train(False)
    encoder = model.step_encoder(tokenizer)
    sequences = encode_examples(encoder, build_examples(steps.solutions))
    at, pooled = lm_layers(int(model.backbone.config.num_hidden_layers))
    if depth is not None:
        # The last hidden state a model returns has its final norm applied: layers below the
        # cut are the ones read, as the whole model has them.
        at, pooled = [k for k in at if k < depth], [k for k in pooled if k < depth]
        layers = model.backbone.layers
        if not isinstance(layers, torch.nn.ModuleList):
            raise SystemExit(f"--lm-depth: {lm} has no list of decoder layers to cut")
        model.backbone.layers = layers[:depth]
        model.backbone.config.num_hidden_layers = depth
    per_sequence: dict[int, dict[str, np.ndarray]] = {}
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i].input_ids))
    with torch.inference_mode():
        for start in range(0, len(order), 8):
            members = order[start : start + 8]
            chunk = [sequences[i] for i in members]
            input_ids, attention_mask = pad_batch([s.input_ids for s in chunk], encoder.pad_id)
            out = model.backbone(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False, output_hidden_states=True
            )
            rows = torch.tensor([row for row, s in enumerate(chunk) for _ in s.label_positions])
            cols = torch.tensor([p for s in chunk for p in s.label_positions])
            starts = torch.tensor([p for s in chunk for p in s.label_starts])
            parts = {}
            if depth is None:
                parts["lm_surprise"] = model.head_vectors(out.last_hidden_state, input_ids, rows, cols, starts)[:, -3:]
            for layer in at:
                parts[f"lm_layer{layer}"] = out.hidden_states[layer][rows, cols]
            spans = list(zip(rows.tolist(), starts.tolist(), cols.tolist(), strict=True))
            for layer in pooled:
                hidden = out.hidden_states[layer]
                parts[f"lm_span{layer}"] = torch.stack([hidden[r, b : c + 1].mean(0) for r, b, c in spans])
            cursor = 0
            for index, sequence in zip(members, chunk, strict=True):
                n = len(sequence.label_positions)
                per_sequence[index] = {k: v[cursor : cursor + n].float().numpy() for k, v in parts.items()}
                cursor += n
    names = per_sequence[0].keys() if per_sequence else []
    return {name: np.concatenate([per_sequence[i][name] for i in range(len(sequences))]) for name in names}


def read(reader: str, steps: Steps, args: argparse.Namespace) -> np.ndarray:
    if reader == "position":
        return np.stack(
            [steps.index, np.log1p(steps.index), steps.index / steps.length, np.log1p(steps.length)], axis=1
        ).astype(np.float64)
    if reader == "causal":
        return _head_vectors(args.backbone, steps)
    if reader == "step_text":
        return _pooled(args.backbone, steps.texts, None, args.max_length)
    if reader == "step_in_problem":
        return _pooled(args.backbone, steps.problems, steps.texts, args.max_length)
    raise ValueError(f"unknown reader {reader!r}; expected one of {', '.join(READERS)}")


def _stored(name: str, steps: Steps, args: argparse.Namespace,
            compute: Callable[[], dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], float]:  # fmt: skip
    """``compute()``'s arrays and the CPU seconds they took, kept in ``--cache`` under ``name`` (and the number
    of steps) and read back from there while the labeled steps are the same."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{name}-{len(steps.texts)}").strip("-")
    path = Path(args.cache) / f"{slug}.npz"
    if path.is_file():
        stored = dict(np.load(path))
        if np.array_equal(stored.pop("fine"), steps.fine):
            return stored, float(stored.pop("cpu_s"))
    start = time.process_time()
    arrays = compute()
    cpu = time.process_time() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, fine=steps.fine, cpu_s=cpu, **arrays)
    return arrays, cpu


def is_lm(reader: str) -> bool:
    return reader == "lm" or LM_READER.fullmatch(reader) is not None


def lm_reading(readings: dict[str, np.ndarray], reader: str, lm: str) -> np.ndarray:
    """One ``lm`` reader's features out of a pass's readings (``_lm_readings``)."""
    if reader == "lm":  # the product's reading: the last layer at the separator, and the surprise
        last = max(int(k.removeprefix("lm_layer")) for k in readings if k.startswith("lm_layer"))
        return np.concatenate([readings[f"lm_layer{last}"], readings["lm_surprise"]], axis=1)
    if reader not in readings:
        kept = ", ".join(sorted(readings, key=lambda k: (len(k), k)))
        raise SystemExit(f"--readers: {reader} is not read from {lm}; it gives {kept}")
    return readings[reader]


def solution_ranks(steps: Steps) -> np.ndarray:
    """Per step, its solution's place among the solutions of its problem in ``steps.solutions`` (0: the first)."""
    seen: dict[str, int] = {}
    ranks = []
    for solution in steps.solutions:
        rank = seen.get(solution.problem_id, 0)
        seen[solution.problem_id] = rank + 1
        ranks += [rank] * len(solution.steps)
    return np.array(ranks)


def pool_positives(
    per_problem: int, problems: set[str], candidates: int = 12, limit_problems: int | None = None
) -> Steps:
    """Every step of up to ``per_problem`` CHAMP solutions per problem (of ``problems``) that the product's grader
    marks correct, as fine steps: of each problem's unannotated solutions, the first ``candidates`` in an order
    hashed from the problem (the annotated ones are the labeled steps, so never here)."""
    import random

    from activelearn.grading.workers import grade_many
    from activelearn.prm.data import LabeledSolution, LabeledStep, RatedCompletion
    from mathtext.extraction import extract_final_answer

    asked: list[tuple[Any, Any, str]] = []
    for problem in _champ(limit_problems or None):
        if problem.unique_id not in problems:
            continue
        annotated = {a.conversation for a in problem.annotations}
        pool = [s for s in problem.solutions if s.conversation not in annotated and s.steps]
        random.Random(problem.unique_id).shuffle(pool)
        for solution in pool[:candidates]:
            given = solution.final_answer or extract_final_answer("\n".join(solution.steps))
            if given:
                asked.append((problem, solution, given))
    grades = grade_many([(given, problem.answer) for problem, _, given in asked])
    chosen: dict[str, list[LabeledSolution]] = {}
    for (problem, solution, _), grade in zip(asked, grades, strict=True):
        kept = chosen.setdefault(problem.unique_id, [])
        if grade.correct and len(kept) < per_problem:
            steps = tuple(LabeledStep((RatedCompletion(text, 1),), chosen=0) for text in solution.steps)
            kept.append(LabeledSolution(problem.unique_id, problem.problem, steps, tuple(solution.steps)))
    solutions = [s for kept in chosen.values() for s in kept]
    rows = [(s, i) for s in solutions for i in range(len(s.steps))]
    return Steps(
        [s.problem_id for s, _ in rows], [s.problem for s, _ in rows], [s.solution_steps[i] for s, i in rows],  # type: ignore[index]
        np.array([i for _, i in rows]), np.array([len(s.steps) for s, _ in rows]), np.ones(len(rows), dtype=bool),
        solutions,
    )  # fmt: skip


def cached(reader: str, steps: Steps, args: argparse.Namespace,
           lm_pass: Callable[[], tuple[dict[str, np.ndarray], float]]) -> tuple[np.ndarray, float]:  # fmt: skip
    """The reader's features and the CPU seconds they took; the ``lm`` readers are cut from ``lm_pass()``."""
    if is_lm(reader):
        readings, cpu = lm_pass()
        return lm_reading(readings, reader, args.lm), cpu
    spec = "" if reader == "position" else args.backbone
    arrays, cpu = _stored(f"{reader}-{spec}", steps, args, lambda: {"X": read(reader, steps, args)})
    return arrays["X"], cpu


# --- one split seed -----------------------------------------------------------------
def _trajectories(steps: Steps, rows: np.ndarray, scores: np.ndarray) -> tuple[list[list[float]], list[int | None]]:
    """Per solution among ``rows``: its step scores and the index of its first wrong step (None: none)."""
    solutions: list[list[float]] = []
    errors: list[int | None] = []
    for row in rows:
        if steps.index[row] == 0:
            solutions.append([])
            errors.append(None)
        solutions[-1].append(float(scores[row]))
        if not steps.fine[row]:
            errors[-1] = int(steps.index[row])
    return solutions, errors


@dataclass(frozen=True)
class ExtraFine:
    """Steps that join training as fine (``--pool-positives``): features, problem of each, and the loss weights to
    choose from on validation (relative to a human label)."""

    features: np.ndarray
    problem_ids: np.ndarray
    weights: tuple[float, ...]
    # Each step's solution's place among its problem's correct solutions (0: the first): with ``per_problem``,
    # only the first that many of each problem join.
    ranks: np.ndarray
    per_problem: int


def _balanced(fine: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``weights`` rescaled so both classes carry half of the total (``class_weight="balanced"`` with weights)."""
    out = weights.astype(np.float64).copy()
    total = out.sum()
    for value in (True, False):
        out[fine == value] *= total / (2 * out[fine == value].sum())
    return out


def decay_f1(scores: np.ndarray, steps: Steps, split: np.ndarray, decays: Sequence[float]) -> dict[str, float]:
    """Validation and test first-error F1 per threshold decay (``val_f1@d``, ``test_f1@d``), by the product's rule:
    the decay in spreads of the validation steps' logits, the threshold the prior quantile of the decayed
    validation scores (``calibration.calibrate``)."""
    from activelearn.prm.evaluation import (
        best_threshold,
        decayed_scores,
        first_error_metrics,
        logit_spread,
        prior_threshold,
    )

    probabilities = 1.0 / (1.0 + np.exp(-scores))  # the regression's P(fine), as the product's head gives
    validation, test = (np.flatnonzero(split == name) for name in ("validation", "test"))
    val_solutions, val_errors = _trajectories(steps, validation, probabilities)
    test_solutions, test_errors = _trajectories(steps, test, probabilities)
    out: dict[str, float] = {}
    for decay in decays:
        absolute = decay * logit_spread(val_solutions)
        threshold, val_metrics = prior_threshold(decayed_scores(val_solutions, absolute), val_errors)
        out[f"val_f1@{decay:g}"] = val_metrics.f1
        decayed_test = decayed_scores(test_solutions, absolute)
        out[f"test_f1@{decay:g}"] = first_error_metrics(decayed_test, test_errors, threshold).f1
        # The threshold that maximises F1 on the test split itself: what no rule chosen beforehand can beat at
        # this decay (every midpoint tried: an upper bound, not a result).
        out[f"hindsight_f1@{decay:g}"] = best_threshold(decayed_test, test_errors, candidates=10**6)[1].f1
    return out


def evaluate(
    features: np.ndarray,
    steps: Steps,
    split: np.ndarray,
    extra: ExtraFine | None = None,
    decays: Sequence[float] = (),
) -> dict[str, float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.preprocessing import StandardScaler

    from activelearn.prm.evaluation import error_prior, first_error_baselines, first_error_metrics, prior_threshold

    train, validation, test = (np.flatnonzero(split == name) for name in ("train", "validation", "test"))
    # Extra fine steps count only from the training problems; weight 0 is the human labels alone.
    problems = set(np.asarray(steps.problem_ids)[train])
    kept = (
        np.zeros(0, dtype=np.int64)
        if extra is None
        else np.flatnonzero(np.isin(extra.problem_ids, list(problems)) & (extra.ranks < extra.per_problem))
    )
    best: tuple[float, float, np.ndarray, float] | None = None
    for weight in (0.0, *(extra.weights if extra is not None else ())):
        rows = kept if weight > 0 else kept[:0]
        x = features[train] if not len(rows) else np.concatenate([features[train], extra.features[rows]])
        y = np.concatenate([steps.fine[train], np.ones(len(rows), dtype=bool)])
        sample = _balanced(y, np.concatenate([np.ones(len(train)), np.full(len(rows), weight)]))
        scaler = StandardScaler().fit(x)
        z, zx = scaler.transform(features), scaler.transform(x)
        for strength in STRENGTHS:
            model = LogisticRegression(C=strength, max_iter=5000)
            scores = model.fit(zx, y, sample_weight=sample).decision_function(z)
            value = float(roc_auc_score(steps.fine[validation], scores[validation]))
            if best is None or value > best[0]:
                best = (value, strength, scores, weight)
    assert best is not None
    val_auroc, strength, scores, weight = best
    z = StandardScaler().fit(features[train]).transform(features)
    threshold, val_first = prior_threshold(*_trajectories(steps, validation, scores))
    test_solutions, test_errors = _trajectories(steps, test, scores)
    level = pooled_level(z, steps, np.concatenate([train, validation]), strength)
    val_scores = np.asarray([v for row in _trajectories(steps, validation, scores)[0] for v in row])
    cv_threshold = float(np.quantile(val_scores, level))
    lengths = [len(s) for s in test_solutions]
    random = first_error_baselines(lengths, test_errors, error_prior(lengths, test_errors))["random_at_prior"]
    return {
        "val_auroc": val_auroc, "test_auroc": float(roc_auc_score(steps.fine[test], scores[test])),
        "val_f1": val_first.f1, "test_f1": first_error_metrics(test_solutions, test_errors, threshold).f1,
        "random_f1": random.f1, "strength": strength,
        "test_f1_cv": first_error_metrics(test_solutions, test_errors, cv_threshold).f1, "level": level,
        "train_solutions": int(np.sum(steps.index[train] == 0)), "extra_weight": weight,
        "extra_steps": len(kept), **decay_f1(scores, steps, split, decays),
    }  # fmt: skip


def pooled_level(z: np.ndarray, steps: Steps, rows: np.ndarray, strength: float, folds: int = 5) -> float:
    """The quantile level of the first-error threshold, chosen on out-of-fold scores over ``rows``' problems."""
    import hashlib

    from sklearn.linear_model import LogisticRegression

    from activelearn.prm.evaluation import error_prior, first_error_metrics

    fold_of = np.array([int(hashlib.sha256(steps.problem_ids[r].encode()).hexdigest(), 16) % folds for r in rows])
    held: list[tuple[list[list[float]], list[int | None], np.ndarray]] = []
    for fold in range(folds):
        inside, outside = rows[fold_of != fold], rows[fold_of == fold]
        model = LogisticRegression(C=strength, class_weight="balanced", max_iter=5000)
        scores = np.zeros(len(steps.fine))
        scores[outside] = model.fit(z[inside], steps.fine[inside]).decision_function(z[outside])
        solutions, errors = _trajectories(steps, outside, scores)
        held.append((solutions, errors, scores[outside]))
    all_solutions = [s for h in held for s in h[0]]
    prior = error_prior([len(s) for s in all_solutions], [e for h in held for e in h[1]])
    best = (-1.0, prior)
    for factor in (0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0):
        level = min(0.99, prior * factor)
        marked: list[list[float]] = []
        for solutions, _, values in held:
            cut = float(np.quantile(values, level))
            marked += [[v - cut for v in s] for s in solutions]
        f1 = first_error_metrics(marked, [e for h in held for e in h[1]], 0.0).f1
        if f1 > best[0]:
            best = (f1, level)
    return best[1]


def splits(steps: Steps, seed: int, share: float = 1.0) -> np.ndarray:
    """Each row's split under ``seed``; with ``share`` < 1, only that share of the training problems (the first
    in a hashed order, as ``prm_champ --curve`` takes them) stays "train", the rest "unused"."""
    import hashlib

    from labeling.data.problem_splits import problem_split_for

    by_problem = {
        p: problem_split_for(unique_id=p, seed=seed, validation=0.2, test=0.2) for p in set(steps.problem_ids)
    }
    if share < 1.0:
        order = sorted((p for p, name in by_problem.items() if name == "train"),
                       key=lambda uid: hashlib.sha256(f"curve:{uid}".encode()).hexdigest())  # fmt: skip
        for uid in order[max(1, round(share * len(order))) :]:
            by_problem[uid] = "unused"
    return np.array([by_problem[p] for p in steps.problem_ids])


# --- the report ---------------------------------------------------------------------
def _interval(values: Sequence[float]) -> str:
    from activelearn.simulation.stats import mean_interval

    mean, half = mean_interval(values)
    return f"{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]"


def report(results: dict[str, list[dict[str, float]]], seeds: list[int], cpu: dict[str, float]) -> list[str]:
    lines = [
        f"Split seeds {', '.join(map(str, seeds))}; test split; mean over seeds [95% t-interval over seeds]. "
        "Chance step AUROC 0.5.",
        "",
        "| reader(s) | features CPU-s | val step AUROC | test step AUROC | test first-error F1 | F1 random at prior "
        "| test AUROC per seed | test F1 per seed | test F1, level from pooled folds | per seed (level) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for combo, rows in results.items():
        # The lm readers come from one pass of the LM: its cost is counted once.
        readers = combo.split(" ", 1)[0].split("+")  # a learning curve's row names its share after a space
        cost = sum({"lm" if is_lm(r) else r: cpu[r] for r in readers}.values())
        per_seed = " / ".join(f"{r['test_auroc']:.3f}" for r in rows)
        f1_per_seed = " / ".join(f"{r['test_f1']:.2f}" for r in rows)
        cv_per_seed = " / ".join(f"{r['test_f1_cv']:.2f} ({r['level']:.2f})" for r in rows)
        lines.append(
            f"| {combo} | {cost:.0f} | {_interval([r['val_auroc'] for r in rows])} "
            f"| {_interval([r['test_auroc'] for r in rows])} | {_interval([r['test_f1'] for r in rows])} "
            f"| {_interval([r['random_f1'] for r in rows])} | {per_seed} | {f1_per_seed} "
            f"| {_interval([r['test_f1_cv'] for r in rows])} | {cv_per_seed} |"
        )
    return lines


def decay_report(results: dict[str, list[dict[str, float]]], decays: Sequence[float]) -> list[str]:
    """Per reader and threshold decay: validation and test first-error F1 (the decay is chosen on the first)."""
    lines = [
        "",
        "| reader(s) | threshold decay (validation logit spreads per log(1 + step)) | val first-error F1 "
        "| test first-error F1 | test F1 per seed | bound: threshold chosen on test | per seed |",
        "|---|---|---|---|---|---|---|",
    ]
    for combo, rows in results.items():
        for decay in decays:
            val, test, bound = f"val_f1@{decay:g}", f"test_f1@{decay:g}", f"hindsight_f1@{decay:g}"
            per_seed = " / ".join(f"{r[test]:.2f}" for r in rows)
            bound_per_seed = " / ".join(f"{r[bound]:.2f}" for r in rows)
            lines.append(
                f"| {combo} | {decay:g} | {_interval([r[val] for r in rows])} "
                f"| {_interval([r[test] for r in rows])} | {per_seed} "
                f"| {_interval([r[bound] for r in rows])} | {bound_per_seed} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--readers", default="causal,step_text,step_in_problem,position",
                        help=f"features to compute, comma-separated, of {', '.join(READERS)}")  # fmt: skip
    parser.add_argument("--combos", help="reader combinations to fit, e.g. causal,causal+step_text (default: each "
                        "reader alone, then all of them together)")  # fmt: skip
    parser.add_argument("--backbone", default="builtin:minilm", help="the reader of causal, step_text, step_in_problem")
    parser.add_argument("--lm", default="builtin:smollm2", help="the causal LM of the lm reader")
    parser.add_argument("--lm-depth", type=int, help="run only the LM's first N layers (read layers below N)")
    parser.add_argument("--max-length", type=int, default=256, help="tokens per pooled text")
    parser.add_argument("--cache", default=str(ROOT / "var" / "prm-readers"), help="where features are kept")
    parser.add_argument("--limit-problems", type=int, help="only the first N CHAMP problems (a quick check)")
    parser.add_argument("--pool-positives", type=int, nargs="+", metavar="K", help="every step of up to K "
                        "correct-answer solutions per problem (the product's grader) joins the training problems' "
                        "labels as fine, at the weight of --pool-weights chosen per seed by validation step AUROC "
                        "(lm readers only); several K: a learning curve, one LM pass")  # fmt: skip
    parser.add_argument("--pool-weights", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    parser.add_argument("--threshold-decays", type=float, nargs="+", metavar="D", help="first-error F1 on "
                        "validation and test, the threshold falling by D logit spreads per log(1 + step)")  # fmt: skip
    parser.add_argument("--train-shares", type=float, nargs="+", help="a learning curve: fit on these shares of "
                        "each seed's training problems too (e.g. 0.25 0.5 1)")  # fmt: skip
    args = parser.parse_args(argv)
    readers = [r for r in args.readers.split(",") if r]
    unknown = sorted(r for r in set(readers) - set(READERS) if not LM_READER.fullmatch(r))
    if unknown:
        parser.error(f"--readers: unknown {', '.join(unknown)}; expected some of {', '.join(READERS)}, "
                     "lm_layerK, lm_spanK, lm_surprise")  # fmt: skip
    combos = args.combos.split(",") if args.combos else [*readers, "+".join(readers)]
    missing = sorted({r for c in combos for r in c.split("+")} - set(readers))
    if missing:
        parser.error(f"--combos uses {', '.join(missing)}, not in --readers")
    decays = sorted(set(args.threshold_decays or []))
    if any(not np.isfinite(d) or d < 0 for d in decays):
        parser.error("--threshold-decays: each must be a finite number >= 0")
    if args.pool_positives is not None and not all(is_lm(r) for r in readers):
        parser.error("--pool-positives reads the pool with the LM: every reader must be an lm reader")

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")
    os.environ.setdefault("SECRET_KEY", "benchmark-only-" + "x" * 40)
    import django

    django.setup()
    steps = champ_steps(args.limit_problems)
    print(f"{len(steps.solutions)} labeled solutions, {len(steps.texts)} labeled steps", file=sys.stderr, flush=True)
    depth = f"-depth{args.lm_depth}" if args.lm_depth else ""

    @functools.cache
    def lm_pass() -> tuple[dict[str, np.ndarray], float]:  # one pass (or one read of the cache) for every lm reader
        return _stored(f"lm-layers-{args.lm}{depth}", steps, args, lambda: _lm_readings(args.lm, steps, args.lm_depth))

    features, cpu = {}, {}
    for reader in readers:
        features[reader], cpu[reader] = cached(reader, steps, args, lm_pass)
        print(f"{reader}: {features[reader].shape[1]} features, {cpu[reader]:.0f} CPU-s", file=sys.stderr, flush=True)
    pool: tuple[Steps, dict[str, np.ndarray]] | None = None
    if args.pool_positives is not None:
        positives = pool_positives(max(args.pool_positives), set(steps.problem_ids), limit_problems=args.limit_problems)
        readings, pool_cpu = _stored(f"pool-positives-{max(args.pool_positives)}-{args.lm}{depth}", positives, args,
                                     lambda: _lm_readings(args.lm, positives, args.lm_depth))  # fmt: skip
        pool = positives, readings
        print(f"pool positives: {len(positives.solutions)} solutions, {len(positives.texts)} steps, "
              f"{pool_cpu:.0f} CPU-s", file=sys.stderr, flush=True)  # fmt: skip
    results: dict[str, list[dict[str, float]]] = {}
    for combo in combos:
        x = np.concatenate([features[r] for r in combo.split("+")], axis=1)
        for share in sorted(args.train_shares or [1.0]):
            rows = [evaluate(x, steps, splits(steps, seed, share), decays=decays) for seed in args.seeds]
            solutions = sum(r["train_solutions"] for r in rows) / len(rows)
            name = combo if share == 1.0 else f"{combo} on {share:.0%} of the training problems"
            results[f"{name} ({solutions:.0f} labeled solutions)" if args.train_shares else name] = rows
        if pool is None:
            continue
        pool_features = np.concatenate([lm_reading(pool[1], r, args.lm) for r in combo.split("+")], axis=1)
        for per_problem in sorted(args.pool_positives):
            extra = ExtraFine(pool_features, np.asarray(pool[0].problem_ids), tuple(args.pool_weights),
                              solution_ranks(pool[0]), per_problem)  # fmt: skip
            rows = [evaluate(x, steps, splits(steps, seed), extra, decays) for seed in args.seeds]
            chosen = " / ".join(f"{r['extra_weight']:g}" for r in rows)
            steps_used = sum(r["extra_steps"] for r in rows) / len(rows)
            results[f"{combo} + up to {per_problem} correct pool solutions a problem ({steps_used:.0f} fine steps; "
                    f"weight per seed {chosen})"] = rows  # fmt: skip
    print("\n".join(report(results, args.seeds, cpu)))
    if decays:
        print("\n".join(decay_report(results, decays)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
