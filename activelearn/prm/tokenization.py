"""The single encoding path shared by training and scoring.

A solution is encoded as ``[leading specials] problem step_1 <sep> step_2 <sep> ...``.
Problem and steps are tokenized separately and concatenated, so the ids of a prefix of
steps are exactly a prefix of the ids of the whole solution; together with causal
attention this is what lets one forward pass score every step.

A step whose prefix (problem + steps up to it) fits in ``max_length`` is scored in one
window holding the whole problem. Past that, windows keep the start of the problem (at
most ``max_problem_tokens``) followed by a strided slice of the steps that ends at or after
the step's separator; which slice depends only on where that separator sits, so a step's
score depends on the problem and the steps up to it alone, at any length (tested).
Every step is scored in exactly one window, which contains its separator.
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
    # Position of each scored step's first token in the window (its separator, when the
    # window cut the step's text away): the span a step's own tokens occupy is
    # ``input_ids[start : separator + 1]``, which step features read (modeling).
    step_starts: tuple[int, ...]


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
        ends: list[int] = []  # exclusive; body[end - 1] is the step's separator
        for ids in step_ids:
            body.extend(ids)
            body.append(self.separator_id)
            ends.append(len(body))
        full_head = [*self.leading_ids, *problem_ids]
        # Every step's window is a function of the problem and of the body up to the step's
        # own separator only, never of how many steps follow: with causal attention that
        # makes a step's score the same whether it is scored alone with its prefix or
        # inside the whole solution, at any length.
        short = [k for k in range(len(step_ids)) if len(full_head) + ends[k] <= self.max_length]
        windows: list[EncodedWindow] = []
        if short:
            # Steps whose prefix fits whole share one window with the whole problem; it is
            # cut after the last of them (later tokens would be invisible to them anyway).
            head_len = len(full_head)
            windows.append(
                EncodedWindow(
                    input_ids=tuple(full_head + body[: ends[short[-1]]]),
                    separator_positions=tuple(head_len + ends[k] - 1 for k in short),
                    step_indices=tuple(short),
                    step_starts=tuple(head_len + (ends[k - 1] if k else 0) for k in short),
                )
            )
        if len(short) == len(step_ids):
            return windows
        # Longer prefixes: the start of the problem, then strided windows over the body.
        # Window w ends at body offset (w + 1) * stride and holds ``budget`` tokens; a
        # separator at offset p is scored in window p // stride, where it sees between
        # budget - stride and budget tokens of the solution before it. The window a
        # separator lands in depends on p alone.
        head = full_head[: self.max_problem_tokens]
        budget = self.max_length - len(head)
        stride = max(1, budget // 2)
        by_window: dict[int, list[int]] = {}
        for k in range(len(short), len(step_ids)):
            by_window.setdefault((ends[k] - 1) // stride, []).append(k)
        for w, members in by_window.items():
            window_start = max(0, (w + 1) * stride - budget)
            window_end = ends[members[-1]]
            offset = len(head) - window_start
            windows.append(
                EncodedWindow(
                    input_ids=tuple(head + body[window_start:window_end]),
                    separator_positions=tuple(ends[k] - 1 + offset for k in members),
                    step_indices=tuple(members),
                    # A step that began before the window's slice starts at the slice.
                    step_starts=tuple(max(window_start, ends[k - 1] if k else 0) + offset for k in members),
                )
            )
        return windows
