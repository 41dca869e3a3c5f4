"""The single encoding path shared by training and scoring.

A solution is encoded as ``[leading specials] problem step_1 <sep> step_2 <sep> ...``.
Problem and steps are tokenized separately and concatenated, so the ids of a prefix of
steps are exactly a prefix of the ids of the whole solution; together with causal
attention this is what lets one forward pass score every step.

Solutions longer than ``max_length`` are cut into windows. Every window keeps the start
of the problem (at most ``max_problem_tokens``) and then as much of the steps as fits,
truncated from the LEFT, ending right after a separator; each step is scored in exactly
one window and that window always contains the step's separator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import AddedToken
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

DEFAULT_SEPARATOR = "<|prm_step|>"


@dataclass(frozen=True)
class EncodedWindow:
    input_ids: tuple[int, ...]
    # Position (within input_ids) of the separator closing each scored step.
    separator_positions: tuple[int, ...]
    # Index (within the solution's steps) of the step each separator closes.
    step_indices: tuple[int, ...]


def add_step_separator(tokenizer: PreTrainedTokenizerBase, separator: str = DEFAULT_SEPARATOR) -> int:
    """Register ``separator`` as a special token (idempotent) and return its id."""
    if separator not in tokenizer.get_vocab():
        tokenizer.add_tokens([AddedToken(separator, special=True, normalized=False)], special_tokens=True)
    return separator_id(tokenizer, separator)


def separator_id(tokenizer: PreTrainedTokenizerBase, separator: str) -> int:
    token_id = tokenizer.convert_tokens_to_ids(separator)
    if not isinstance(token_id, int) or token_id == tokenizer.unk_token_id:
        raise ValueError(f"separator {separator!r} is not in the tokenizer vocabulary")
    return token_id


def _leading_special_ids(tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    # Tokenizers disagree on what they prepend ([CLS] for BERT, <s> for Llama, nothing
    # for Qwen); probing a one-token text tells us without per-family special cases.
    with_specials: list[int] = tokenizer("a")["input_ids"]
    plain: list[int] = tokenizer("a", add_special_tokens=False)["input_ids"]
    for offset in range(len(with_specials) - len(plain) + 1):
        if with_specials[offset : offset + len(plain)] == plain:
            return tuple(with_specials[:offset])
    return ()


class StepEncoder:
    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        separator: str = DEFAULT_SEPARATOR,
        max_length: int = 512,
        max_problem_tokens: int = 256,
    ) -> None:
        self.tokenizer = tokenizer
        self.separator_id = separator_id(tokenizer, separator)
        self.leading_ids = _leading_special_ids(tokenizer)
        if max_problem_tokens < len(self.leading_ids) or max_problem_tokens >= max_length:
            raise ValueError("need len(leading specials) <= max_problem_tokens < max_length")
        self.max_length = max_length
        self.max_problem_tokens = max_problem_tokens
        pad = tokenizer.pad_token_id
        self.pad_id: int = pad if isinstance(pad, int) else 0

    def encode(self, problem: str, steps: Sequence[str]) -> list[EncodedWindow]:
        return self.encode_many([(problem, steps)])[0]

    def encode_many(self, solutions: Sequence[tuple[str, Sequence[str]]]) -> list[list[EncodedWindow]]:
        # One batched tokenizer call for all texts: the fast tokenizer parallelises it.
        texts: list[str] = []
        for problem, steps in solutions:
            texts.append(problem)
            texts.extend(steps)
        ids: list[list[int]] = self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        result: list[list[EncodedWindow]] = []
        cursor = 0
        for _, steps in solutions:
            problem_ids = ids[cursor]
            step_ids = ids[cursor + 1 : cursor + 1 + len(steps)]
            cursor += 1 + len(steps)
            result.append(self.assemble(problem_ids, step_ids))
        return result

    def assemble(self, problem_ids: Sequence[int], step_ids: Sequence[Sequence[int]]) -> list[EncodedWindow]:
        if not step_ids:
            raise ValueError("a solution needs at least one step")
        body: list[int] = []
        starts: list[int] = []
        ends: list[int] = []  # exclusive; body[end - 1] is the step's separator
        for ids in step_ids:
            starts.append(len(body))
            body.extend(ids)
            body.append(self.separator_id)
            ends.append(len(body))
        full_head = [*self.leading_ids, *problem_ids]
        if len(full_head) + len(body) <= self.max_length:
            head_len = len(full_head)
            return [
                EncodedWindow(
                    input_ids=tuple(full_head + body),
                    separator_positions=tuple(head_len + end - 1 for end in ends),
                    step_indices=tuple(range(len(step_ids))),
                )
            ]
        head = full_head[: self.max_problem_tokens]
        budget = self.max_length - len(head)
        windows: list[EncodedWindow] = []
        first = 0
        while first < len(step_ids):
            last = first
            # Pack following steps into the same window while the first one still fits
            # whole; a single step longer than the budget gets its own left-cut window.
            while last + 1 < len(step_ids) and ends[last + 1] - starts[first] <= budget:
                last += 1
            window_end = ends[last]
            window_start = max(0, window_end - budget)
            offset = len(head) - window_start
            windows.append(
                EncodedWindow(
                    input_ids=tuple(head + body[window_start:window_end]),
                    separator_positions=tuple(ends[k] - 1 + offset for k in range(first, last + 1)),
                    step_indices=tuple(range(first, last + 1)),
                )
            )
            first = last + 1
        return windows
