import math

import pytest
import torch
from torch.utils.hooks import RemovableHandle

from activelearn.prm.batching import TrainingCollator, encode_examples
from activelearn.prm.data import LabeledSolution, LabeledStep, RatedCompletion, build_examples
from activelearn.prm.modeling import ProcessRewardModel
from activelearn.prm.scoring import score_solutions


def _record_backbone_inputs(model: ProcessRewardModel) -> tuple[list[list[int]], RemovableHandle]:
    seen: list[list[int]] = []

    def hook(_module: object, _args: object, kwargs: dict[str, torch.Tensor]) -> None:
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        for row, row_mask in zip(ids.tolist(), mask.tolist(), strict=True):
            seen.append(row[: sum(row_mask)])

    handle = model.backbone.register_forward_pre_hook(hook, with_kwargs=True)
    return seen, handle


def test_training_and_scoring_feed_the_backbone_identical_ids(tiny_prm):
    model, tokenizer = tiny_prm
    steps = ("First, 12 * 3 = 36.", "Then 36 + 4 = 40.", "So the answer is 40.")
    solution = LabeledSolution(
        "p", "What is 12 * 3 + 4?", tuple(LabeledStep((RatedCompletion(s, 1),), chosen=0) for s in steps)
    )
    training_sequence = encode_examples(model.step_encoder(tokenizer), build_examples([solution]))[0]
    batch = TrainingCollator(pad_id=0)([training_sequence])
    assert batch["input_ids"][0].tolist() == list(training_sequence.input_ids)

    seen, handle = _record_backbone_inputs(model)
    try:
        score_solutions(model, tokenizer, [(solution.problem, steps[:2]), (solution.problem, steps)])
    finally:
        handle.remove()
    full = list(training_sequence.input_ids)
    assert full in seen
    prefix = next(ids for ids in seen if ids != full)
    # The two-step prefix is token for token the start of the training sequence.
    assert prefix == full[: len(prefix)]
    assert prefix[-1] == model.step_encoder(tokenizer).separator_id


def test_a_step_score_depends_only_on_its_prefix(tiny_prm):
    model, tokenizer = tiny_prm
    problem, steps = "Solve x + 1 = 3.", ["Subtract 1.", "x = 2.", "Check: 2 + 1 = 3."]
    full = score_solutions(model, tokenizer, [(problem, steps)])[0]
    for k in range(1, len(steps)):
        prefix = score_solutions(model, tokenizer, [(problem, steps[:k])])[0]
        assert torch.allclose(torch.tensor(prefix.step_scores), torch.tensor(full.step_scores[:k]), atol=1e-5)


def test_long_solutions_are_left_truncated_and_every_step_is_scored(tiny_prm):
    model, tokenizer = tiny_prm
    encoder = model.step_encoder(tokenizer)  # max_length 128, problem head 32
    problem = " ".join(f"word{i}" for i in range(200))
    steps = [f"step {i} " + " ".join(["seven"] * (i % 7 + 3)) for i in range(40)]
    steps[17] = " ".join(["eight"] * 400)  # longer than a whole window on its own
    windows = encoder.encode(problem, steps)
    assert len(windows) > 1
    scored = sorted(i for w in windows for i in w.step_indices)
    assert scored == list(range(len(steps)))
    problem_head = windows[0].input_ids[:32]
    for window in windows:
        assert len(window.input_ids) <= 128
        assert window.input_ids[:32] == problem_head
        assert window.input_ids[-1] == encoder.separator_id
        assert all(window.input_ids[p] == encoder.separator_id for p in window.separator_positions)
    long_window = next(w for w in windows if 17 in w.step_indices)
    # The step is cut from its left: at least half a window of it (96 tokens beside the
    # 32-token problem head) stays before its separator.
    separator = long_window.separator_positions[long_window.step_indices.index(17)]
    eight = tokenizer("eight", add_special_tokens=False)["input_ids"][0]
    assert long_window.input_ids[separator - 48 : separator] == (eight,) * 48

    result = score_solutions(model, tokenizer, [(problem, steps), ("short", ["one step"])], batch_size=4)
    assert len(result[0].step_scores) == len(steps)
    assert all(0.0 <= s <= 1.0 and not math.isnan(s) for s in result[0].step_scores)
    assert len(result[1].step_scores) == 1


def test_step_scores_past_the_window_depend_only_on_the_prefix(tiny_prm):
    model, tokenizer = tiny_prm  # max_length 128
    problem = "Find the sum of the first forty odd numbers and explain every step."
    steps = [f"step {i}: " + " ".join(["add", "the", "next", "odd", "number"][: i % 5 + 1] * 3) for i in range(40)]
    steps[11] = " ".join(["long"] * 200)  # a single step longer than a window
    assert len(model.step_encoder(tokenizer).encode(problem, steps)) > 2
    full = score_solutions(model, tokenizer, [(problem, steps)], batch_size=3)[0]
    prefixes = score_solutions(model, tokenizer, [(problem, steps[:k]) for k in range(1, len(steps) + 1)], batch_size=5)
    for k, prefix in enumerate(prefixes, start=1):
        assert prefix.step_scores[-1] == pytest.approx(full.step_scores[k - 1], abs=1e-5), f"step {k - 1}"


def test_a_later_step_never_changes_an_earlier_window(tiny_prm):
    model, tokenizer = tiny_prm
    encoder = model.step_encoder(tokenizer)
    problem = "word " * 90  # long enough that only the first steps fit with the whole problem
    steps = [f"step {i} " + "x " * (i % 9) for i in range(30)]

    def contexts(count: int) -> dict[int, tuple[int, ...]]:
        found: dict[int, tuple[int, ...]] = {}
        for window in encoder.encode(problem, steps[:count]):
            for step, position in zip(window.step_indices, window.separator_positions, strict=True):
                found[step] = window.input_ids[: position + 1]
        return found

    everything = contexts(len(steps))
    for count in range(1, len(steps)):
        seen = contexts(count)
        assert all(seen[step] == everything[step] for step in seen)
