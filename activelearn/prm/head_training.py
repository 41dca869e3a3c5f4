"""Training only the head on a frozen backbone: features once, then seconds per epoch.

With every backbone layer frozen the backbone's output at each labeled separator never
changes, so it is computed once (one forward pass over the training and validation
sequences, no backward) and the 3-class head is fitted on those vectors. On a 2-core CPU
that is the difference between tens of minutes and a couple of minutes for a few hundred
labeled solutions (docs/prm.md, "Real data"). Features are standardised for the fit and
the scaling is folded back into the head's weights, so the saved model is an ordinary
PRM: scoring runs the same code as for a fine-tuned one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.nn import functional as F

from activelearn.prm import feature_cache
from activelearn.prm.batching import LabeledSequence, encode_examples, pad_batch
from activelearn.prm.data import LabeledSolution, build_examples
from activelearn.prm.evaluation import auroc
from activelearn.prm.feature_cache import FeatureCache
from activelearn.prm.modeling import NEGATIVE, ProcessRewardModel, weighted_cross_entropy

# Sequences per forward pass when computing features (inference only, so larger than a
# training batch).
FEATURE_BATCH = 16


@dataclass(frozen=True)
class Features:
    vectors: torch.Tensor  # [labels, hidden], float32
    classes: torch.Tensor  # [labels], long
    # [labels] loss weight of each label (LabeledSequence.label_weights); None: all 1.
    weights: torch.Tensor | None = None


def with_label_weights(features: Features, sequences: Sequence[LabeledSequence]) -> Features:
    """``features`` of ``sequences`` (in their order) with each label's loss weight."""
    weights = [w for sequence in sequences for w in sequence.weights()]
    if len(weights) != len(features.classes):
        raise ValueError(f"{len(weights)} label weights for {len(features.classes)} features")
    return replace(features, weights=torch.tensor(weights, dtype=torch.float32))


@dataclass(frozen=True)
class HeadEpoch:
    step: int
    train_loss: float
    val_loss: float | None
    val_accuracy: float | None
    val_majority_accuracy: float | None
    val_auroc: float | None
    val_labeled_steps: int


def backbone_is_frozen(model: ProcessRewardModel) -> bool:
    return not any(parameter.requires_grad for parameter in model.backbone.parameters())


def separator_features(
    model: ProcessRewardModel,
    sequences: Sequence[LabeledSequence],
    pad_id: int,
    device: torch.device,
    on_batch: Callable[[], None] | None = None,
    *,
    separator_id: int | None = None,
    cache: FeatureCache | None = None,
) -> Features:
    """What the head reads at every labeled separator (the backbone's last hidden state and
    any step features, ``ProcessRewardModel.head_vectors``), in sequence order.

    With ``separator_id``, they come through the feature cache (``cache``, else the
    configured one; ``feature_cache``): the separators' hidden states, or, for a PRM with
    step features, each step's head vector."""
    if separator_id is not None and feature_cache.cacheable(model):
        by_window = feature_cache.separator_hidden(
            model,
            [s.input_ids for s in sequences],
            pad_id=pad_id,
            separator_id=separator_id,
            device=device,
            cache=cache or feature_cache.configured(),
            on_batch=on_batch,
        )
        picked = [found[p] for found, s in zip(by_window, sequences, strict=True) for p in s.label_positions]
        vectors = torch.stack(picked) if picked else torch.zeros(0, model.prm_config.head_inputs)
        return Features(vectors, torch.tensor([c for s in sequences for c in s.label_classes], dtype=torch.long))
    if separator_id is not None:
        # Step features read each step's span: the cache keeps them per step, every step of
        # a window at once (the forward pass is the cost; the head vectors are not).
        requests = [
            feature_cache.StepRequest(s.input_ids, s.window_positions, s.window_starts)
            if set(s.label_positions) <= set(s.window_positions)
            else feature_cache.StepRequest(s.input_ids, s.label_positions, s.label_starts)
            for s in sequences
        ]
        per_window = feature_cache.step_vectors(
            model,
            requests,
            pad_id=pad_id,
            device=device,
            cache=cache or feature_cache.configured(),
            on_batch=on_batch,
        )
        picked = [
            vectors[[list(request.positions).index(p) for p in s.label_positions]]
            for vectors, request, s in zip(per_window, requests, sequences, strict=True)
        ]
        return Features(
            torch.cat(picked) if picked else torch.zeros(0, model.prm_config.head_inputs),
            torch.tensor([c for s in sequences for c in s.label_classes], dtype=torch.long),
        )
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i].input_ids))
    per_sequence: dict[int, torch.Tensor] = {}
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            # Sorted by length so each batch pads little; put back in order afterwards.
            for start in range(0, len(order), FEATURE_BATCH):
                members = order[start : start + FEATURE_BATCH]
                chunk = [sequences[i] for i in members]
                input_ids, attention_mask = pad_batch([s.input_ids for s in chunk], pad_id)
                input_ids = input_ids.to(device)
                hidden = model.backbone(
                    input_ids=input_ids, attention_mask=attention_mask.to(device), use_cache=False
                ).last_hidden_state
                rows = torch.tensor([row for row, s in enumerate(chunk) for _ in s.label_positions], device=device)
                cols = torch.tensor([p for s in chunk for p in s.label_positions], device=device)
                starts = torch.tensor([p for s in chunk for p in s.label_starts], device=device)
                vectors = model.head_vectors(hidden, input_ids, rows, cols, starts).float().cpu()
                cursor = 0
                for index, sequence in zip(members, chunk, strict=True):
                    per_sequence[index] = vectors[cursor : cursor + len(sequence.label_positions)]
                    cursor += len(sequence.label_positions)
                if on_batch is not None:
                    on_batch()
    finally:
        model.train(was_training)
    if not per_sequence:
        return Features(torch.zeros(0, model.prm_config.head_inputs), torch.zeros(0, dtype=torch.long))
    return Features(
        torch.cat([per_sequence[i] for i in range(len(sequences))]),
        torch.tensor([c for s in sequences for c in s.label_classes], dtype=torch.long),
    )


def _evaluate(head: torch.nn.Linear, features: Features) -> tuple[float, float, float, float | None]:
    with torch.no_grad():
        logits = head(features.vectors)
        loss = float(F.cross_entropy(logits, features.classes).item())
        accuracy = float((logits.argmax(dim=-1) == features.classes).float().mean().item())
        majority = float(torch.bincount(features.classes).max().item() / len(features.classes))
        fine = (features.classes != NEGATIVE).tolist()
        fine_probability = (1.0 - torch.softmax(logits, dim=-1)[:, NEGATIVE]).tolist()
        step_auroc = auroc(fine_probability, fine) if 0 < sum(fine) < len(fine) else None
    return loss, accuracy, majority, step_auroc


@contextmanager
def _one_thread() -> Iterator[None]:
    """A step of a linear head on a batch of 8 vectors is microseconds of arithmetic; on
    several threads each operation waits at the thread pool's barrier, and on a busy
    machine (a worker sharing its cores) that wait took 10-30 ms a step, a minute for the
    default recipe's 1,765 steps on CHAMP against 3 s on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@_one_thread()
def fit_head(
    model: ProcessRewardModel,
    train: Features,
    validation: Features,
    *,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    weight_decay: float,
    class_weights: torch.Tensor | None,
    seed: int,
    on_step: Callable[[int, int, float], None] | None = None,
    on_epoch: Callable[[HeadEpoch], None] | None = None,
) -> list[tuple[int, float]]:
    """Fit ``model.head`` on standardised features; returns the (step, loss) curve."""
    if len(train.classes) == 0:
        raise ValueError("no labeled steps to train on")
    mean = train.vectors.mean(dim=0)
    scale = train.vectors.std(dim=0).clamp_min(1e-6)
    standard_train = Features((train.vectors - mean) / scale, train.classes, train.weights)
    standard_val = Features((validation.vectors - mean) / scale, validation.classes)
    torch.manual_seed(seed)
    head = torch.nn.Linear(train.vectors.shape[1], len(model.prm_config.label_names))
    optimizer = torch.optim.AdamW(head.parameters(), lr=learning_rate, weight_decay=weight_decay)
    rng = random.Random(seed)
    order = list(range(len(train.classes)))
    steps_per_epoch = -(-len(order) // batch_size)
    total = steps_per_epoch * epochs
    curve: list[tuple[int, float]] = []
    step = 0
    for _ in range(epochs):
        rng.shuffle(order)
        losses: list[float] = []
        for start in range(0, len(order), batch_size):
            index = torch.tensor(order[start : start + batch_size])
            logits = head(standard_train.vectors[index])
            weights = None if standard_train.weights is None else standard_train.weights[index]
            loss = weighted_cross_entropy(logits, standard_train.classes[index], class_weights, weights)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            step += 1
            losses.append(float(loss.item()))
            curve.append((step, losses[-1]))
            if on_step is not None:
                on_step(step, total, losses[-1])
        if on_epoch is not None:
            if len(standard_val.classes):
                val_loss, accuracy, majority, step_auroc = _evaluate(head, standard_val)
                report = HeadEpoch(
                    step, sum(losses) / len(losses), val_loss, accuracy, majority, step_auroc, len(standard_val.classes)
                )
            else:
                report = HeadEpoch(step, sum(losses) / len(losses), None, None, None, None, 0)
            on_epoch(report)
    _fold_into(model, head, mean, scale)
    return curve


@dataclass(frozen=True)
class PenalisedFit:
    penalty: float  # the L2 strength chosen
    # Validation step AUROC of each strength tried (None: validation has one class only).
    val_aurocs: dict[float, float | None]
    report: HeadEpoch  # the chosen head's validation report
    curve: list[tuple[int, float]]  # its (iteration, objective) curve


# L-BFGS iterations per strength: the objective is convex and smooth, and a few hundred
# features converge well within this on CHAMP's few thousand labels.
PENALISED_ITERATIONS = 200


def _penalised_head(
    train: Features, classes: int, penalty: float, class_weights: torch.Tensor | None
) -> tuple[torch.nn.Linear, list[tuple[int, float]]]:
    head = torch.nn.Linear(train.vectors.shape[1], classes)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
    optimizer = torch.optim.LBFGS(
        head.parameters(), lr=1.0, max_iter=PENALISED_ITERATIONS, history_size=20, line_search_fn="strong_wolfe"
    )
    curve: list[tuple[int, float]] = []

    def objective() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = weighted_cross_entropy(head(train.vectors), train.classes, class_weights, train.weights)
        # The bias is not penalised: the class prior is not what overfits.
        loss = loss + 0.5 * penalty * head.weight.pow(2).sum()
        loss.backward()  # type: ignore[no-untyped-call]
        curve.append((len(curve) + 1, float(loss.item())))
        return loss

    optimizer.step(objective)  # type: ignore[no-untyped-call]
    return head, curve


@_one_thread()
def fit_penalised_head(
    model: ProcessRewardModel,
    train: Features,
    validation: Features,
    *,
    penalties: Sequence[float],
    class_weights: torch.Tensor | None,
) -> PenalisedFit:
    """Fit ``model.head`` as an L2-penalised multinomial regression on standardised features,
    once per strength in ``penalties`` (the weighted mean cross-entropy plus ``penalty / 2``
    times the squared weights), and keep the one with the best validation step AUROC (on a
    tie, the stronger). Full-batch L-BFGS from zero: the optimum, whatever the seed.

    With as many features as a causal LM's hidden state and its span (1,152 for SmolLM2),
    a few thousand labels overfit an unpenalised head: on CHAMP the epochs' validation
    AUROC peaked and fell (docs/prm.md)."""
    if len(train.classes) == 0:
        raise ValueError("no labeled steps to train on")
    if not penalties:
        raise ValueError("no L2 strength to try")
    mean = train.vectors.mean(dim=0)
    scale = train.vectors.std(dim=0).clamp_min(1e-6)
    standard_train = Features((train.vectors - mean) / scale, train.classes, train.weights)
    standard_val = Features((validation.vectors - mean) / scale, validation.classes)
    classes = len(model.prm_config.label_names)
    best: tuple[float, float, torch.nn.Linear, list[tuple[int, float]]] | None = None
    aurocs: dict[float, float | None] = {}
    for penalty in sorted(penalties, reverse=True):
        head, curve = _penalised_head(standard_train, classes, penalty, class_weights)
        value = _evaluate(head, standard_val)[3] if len(standard_val.classes) else None
        aurocs[penalty] = value
        rank = -math.inf if value is None else value
        if best is None or rank > best[0]:
            best = (rank, penalty, head, curve)
    assert best is not None
    _, penalty, head, curve = best
    with torch.no_grad():
        train_loss = float(weighted_cross_entropy(head(standard_train.vectors), standard_train.classes).item())
    if len(standard_val.classes):
        val_loss, accuracy, majority, step_auroc = _evaluate(head, standard_val)
        report = HeadEpoch(len(curve), train_loss, val_loss, accuracy, majority, step_auroc, len(standard_val.classes))
    else:
        report = HeadEpoch(len(curve), train_loss, None, None, None, None, 0)
    _fold_into(model, head, mean, scale)
    return PenalisedFit(penalty, aurocs, report, curve)


def _fold_into(model: ProcessRewardModel, head: torch.nn.Linear, mean: torch.Tensor, scale: torch.Tensor) -> None:
    """Fold the standardisation into the head: W (x - m) / s + b = (W / s) x + (b - W m / s)."""
    with torch.no_grad():
        weight = head.weight / scale
        bias = head.bias - weight @ mean
        model.head.weight.copy_(weight.to(model.head.weight.dtype))
        model.head.bias.copy_(bias.to(model.head.bias.dtype))


def surprise_step_auroc(
    backbone: str, solutions: Sequence[LabeledSolution], *, max_length: int | None = None
) -> float | None:
    """Step AUROC of the label-free baseline: each labeled step ranked by the frozen LM's
    summed surprise at its tokens (``STEP_FEATURES["surprise"]``), higher = more likely
    wrong. None for a backbone that cannot compute it (an encoder, an untied LM)."""
    return surprise_step_aurocs(backbone, [solutions], max_length=max_length)[0]


def surprise_step_aurocs(
    backbone: str, solution_sets: Sequence[Sequence[LabeledSolution]], *, max_length: int | None = None
) -> list[float | None]:
    """``surprise_step_auroc`` of each set (validation, test), the backbone loaded once for all."""
    try:
        model, tokenizer = ProcessRewardModel.from_backbone(backbone, max_length=max_length, step_features=["surprise"])
    except ValueError:
        return [None for _ in solution_sets]
    values: list[float | None] = []
    for solutions in solution_sets:
        surprise, fine = step_surprises(model, tokenizer, solutions)
        values.append(auroc([-x for x in surprise], fine))
    return values


def step_surprises(
    model: ProcessRewardModel, tokenizer: Any, solutions: Sequence[LabeledSolution]
) -> tuple[list[float], list[bool]]:
    """Each labeled step's summed surprise (a PRM built with ``step_features=["surprise"]``)
    and whether it is not rated wrong, in the order of ``solutions`` and their steps."""
    encoder = model.step_encoder(tokenizer)
    features = separator_features(
        model, encode_examples(encoder, build_examples(solutions)), encoder.pad_id, torch.device("cpu")
    )
    return features.vectors[:, -1].tolist(), (features.classes != NEGATIVE).tolist()  # the last feature: the sum
