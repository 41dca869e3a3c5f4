"""Turning encoded windows into padded tensors, and ordering them to waste little padding."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Sampler

from activelearn.prm.data import StepExample
from activelearn.prm.modeling import IGNORE_INDEX
from activelearn.prm.tokenization import StepEncoder


@dataclass(frozen=True)
class LabeledSequence:
    input_ids: tuple[int, ...]
    label_positions: tuple[int, ...]
    label_classes: tuple[int, ...]
    # First token of each labeled step (EncodedWindow.step_starts), for step features.
    label_starts: tuple[int, ...]
    # Loss weight of each label (StepExample.weights); None: 1 for every label.
    label_weights: tuple[float, ...] | None = None
    # Every step the window scores, labeled or not (EncodedWindow.separator_positions and
    # step_starts): the feature cache stores them all from the one forward pass, so a
    # solution labeled at its final step (an ORM's) leaves what scoring it whole reads.
    window_positions: tuple[int, ...] = ()
    window_starts: tuple[int, ...] = ()

    def weights(self) -> tuple[float, ...]:
        return self.label_weights if self.label_weights is not None else (1.0,) * len(self.label_classes)


def encode_examples(encoder: StepEncoder, examples: Sequence[StepExample]) -> list[LabeledSequence]:
    """Windows of every example that carry at least one label (others would cost compute for nothing)."""
    encoded = encoder.encode_many([(example.problem, example.steps) for example in examples])
    sequences: list[LabeledSequence] = []
    for example, windows in zip(examples, encoded, strict=True):
        for window in windows:
            labeled = [
                (position, label, start, example.label_weight(step))
                for position, step, start in zip(
                    window.separator_positions, window.step_indices, window.step_starts, strict=True
                )
                if (label := example.labels[step]) is not None
            ]
            if labeled:
                sequences.append(
                    LabeledSequence(
                        input_ids=window.input_ids,
                        label_positions=tuple(p for p, _, _, _ in labeled),
                        label_classes=tuple(c for _, c, _, _ in labeled),
                        label_starts=tuple(s for _, _, s, _ in labeled),
                        label_weights=None if example.weights is None else tuple(w for _, _, _, w in labeled),
                        window_positions=window.separator_positions,
                        window_starts=window.step_starts,
                    )
                )
    return sequences


def padded_length(longest: int, multiple: int) -> int:
    return -(-longest // multiple) * multiple


def pad_batch(rows: Sequence[Sequence[int]], pad_id: int, multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids`` and ``attention_mask``."""
    width = padded_length(max(len(row) for row in rows), multiple)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        input_ids[index, : len(row)] = torch.as_tensor(row, dtype=torch.long)
        attention_mask[index, : len(row)] = 1
    return input_ids, attention_mask


@dataclass(frozen=True)
class TrainingCollator:
    pad_id: int
    pad_to_multiple_of: int = 1

    def __call__(self, batch: Sequence[LabeledSequence]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = pad_batch([item.input_ids for item in batch], self.pad_id, self.pad_to_multiple_of)
        labels = torch.full_like(input_ids, IGNORE_INDEX)
        # Laid out like ``labels``: at a labeled separator, where its step's tokens begin
        # and the loss weight of its label.
        step_starts = torch.zeros_like(input_ids)
        label_weights = torch.zeros(input_ids.shape, dtype=torch.float32)
        for row, item in enumerate(batch):
            positions = list(item.label_positions)
            labels[row, positions] = torch.as_tensor(item.label_classes, dtype=torch.long)
            step_starts[row, positions] = torch.as_tensor(item.label_starts, dtype=torch.long)
            label_weights[row, positions] = torch.as_tensor(item.weights(), dtype=torch.float32)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": labels,
            "step_starts": step_starts,
            "label_weights": label_weights,
        }


def length_grouped_batches(
    lengths: Sequence[int], batch_size: int, mega_batch_batches: int, seed: int
) -> list[list[int]]:
    """Shuffle, sort by length inside mega-batches, then shuffle the batches.

    Sorting only within mega-batches keeps most of the padding savings while batches
    still mix examples from all over the dataset; shuffling the batches stops the model
    from seeing a long-to-short curriculum inside each mega-batch.
    """
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    mega = max(1, batch_size * mega_batch_batches)
    batches: list[list[int]] = []
    for start in range(0, len(order), mega):
        chunk = sorted(order[start : start + mega], key=lambda index: -lengths[index])
        batches.extend(chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


class EpochBatchSampler(Sampler[list[int]]):
    """Length-grouped batches whose order depends only on (seed, epoch).

    That determinism is what makes resuming exact: the resumed run rebuilds the same
    order for the interrupted epoch and skips the batches already consumed.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, mega_batch_batches: int, seed: int) -> None:
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.drop_last = False
        self.mega_batch_batches = mega_batch_batches
        self.seed = seed
        self.epoch = 0

    def order_seed(self) -> int:
        return self.seed * 1_000_003 + self.epoch

    def __iter__(self) -> Iterator[list[int]]:
        return iter(length_grouped_batches(self.lengths, self.batch_size, self.mega_batch_batches, self.order_seed()))

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)
