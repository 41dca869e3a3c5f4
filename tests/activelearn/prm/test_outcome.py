"""Outcome supervision: the ORM (trained on answer verdicts only, scored at its final step)
and outcome labels mixed into a PRM's human step labels."""

from __future__ import annotations

import json
import random

import pytest
import torch
from safetensors.torch import load_file
from torch.nn import functional as F

from activelearn.prm import OutcomeSolution
from activelearn.prm.batching import LabeledSequence, TrainingCollator, encode_examples
from activelearn.prm.data import StepExample, outcome_example, training_examples
from activelearn.prm.evaluation import auroc
from activelearn.prm.modeling import CONFIG_FILE, NEGATIVE, POSITIVE, PRMConfig, ProcessRewardModel
from activelearn.prm.scoring import score_solutions
from activelearn.prm.training import TrainResult, class_weights, train_prm

from .conftest import FILLER, keyword_solutions, tiny_config


def outcome_solutions(count: int, seed: int) -> list[OutcomeSolution]:
    """Right or wrong by the word that closes the final step; earlier steps end in either
    word at random, so only the final step tells."""
    rng = random.Random(seed)
    solutions = []
    for index in range(count):
        correct = rng.random() < 0.5
        earlier = [" ".join([*rng.sample(FILLER, 4), rng.choice(["correct", "wrong"])]) for _ in range(2)]
        final = "so the answer is " + ("correct" if correct else "wrong")
        solutions.append(
            OutcomeSolution(f"o{seed}-{index}", f"problem number {index}", (*earlier, final), correct=correct)
        )
    return solutions


def _held_out_final_step_auroc(result: TrainResult, held_out: list[OutcomeSolution]) -> float:
    model, tokenizer = ProcessRewardModel.from_pretrained(result.final_dir)
    assert model.prm_config.objective == "outcome"
    scores = score_solutions(model, tokenizer, [(s.problem, s.steps) for s in held_out], 16, "last", "positive")
    return auroc([score.score for score in scores], [s.correct for s in held_out])


@pytest.mark.parametrize(
    ("path", "overrides", "floor"),
    [
        # Random frozen 2-layer features carry part of the final word; the head finds it.
        ("head only", dict(freeze_layers=99, num_epochs=20), 0.7),
        ("fine-tune", dict(freeze_layers=0, num_epochs=3), 0.95),
    ],
)
def test_an_orm_learns_whether_the_answer_is_right_from_answer_verdicts_alone(tmp_path, path, overrides, floor):
    held_out = outcome_solutions(60, seed=3)
    result = train_prm(
        outcome_solutions(160, seed=1),
        tiny_config(tmp_path, objective="outcome", **overrides),
        validation=outcome_solutions(40, seed=2),
    )
    assert result.outcome_labels == 160 and result.human_labels == 0
    # One label per solution, at its final step: validation counts one per solution.
    assert result.val_labeled_steps == 40
    assert result.val_auroc is not None and result.val_auroc > floor
    assert _held_out_final_step_auroc(result, held_out) > floor
    assert result.calibration is not None
    assert result.calibration["aggregation"] == "last" and result.calibration["threshold"] is None
    assert result.hyperparameters["objective"] == "outcome"
    saved = json.loads((result.final_dir / CONFIG_FILE).read_text())
    assert saved["objective"] == "outcome"


def test_a_prm_saved_before_objectives_existed_reads_as_a_process_model(tmp_path, tiny_prm):
    model, tokenizer = tiny_prm
    model.save_pretrained(tmp_path / "old", tokenizer)
    config = json.loads((tmp_path / "old" / CONFIG_FILE).read_text())
    assert config.pop("objective") == "process"
    (tmp_path / "old" / CONFIG_FILE).write_text(json.dumps(config))
    loaded, _ = ProcessRewardModel.from_pretrained(tmp_path / "old")
    assert loaded.prm_config.objective == "process"
    with pytest.raises(ValueError, match="objective must be one of"):
        PRMConfig.from_json(json.dumps({**config, "objective": "reward"}))


def test_an_orm_refuses_human_step_labels_and_says_which_item(tmp_path):
    items = [*outcome_solutions(3, seed=1), *keyword_solutions(1, seed=1)]
    with pytest.raises(ValueError, match=r"OutcomeSolution items only; item 3 is a LabeledSolution \(problem 'p1-0'\)"):
        train_prm(items, tiny_config(tmp_path, objective="outcome"), validation=[])
    assert not (tmp_path / "final").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(objective="reward"), "objective must be one of"),
        (dict(outcome_weight=-1.0), "outcome_weight must be a finite number >= 0"),
        (dict(outcome_weight=float("nan")), "outcome_weight must be a finite number >= 0"),
        (dict(outcome_targets="first"), "outcome_targets must be one of"),
        (dict(objective="outcome", outcome_targets="every_step"), "an ORM .* labels the final step only"),
    ],
)
def test_bad_outcome_options_are_refused_when_the_config_is_made(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(tmp_path, **overrides)


@pytest.mark.parametrize("weight", [-0.5, float("inf")])
def test_an_outcome_solution_needs_steps_and_a_usable_weight(weight):
    with pytest.raises(ValueError, match="has no steps"):
        OutcomeSolution("p", "problem", (), correct=True)
    with pytest.raises(ValueError, match="weight must be >= 0"):
        OutcomeSolution("p", "problem", ("a",), correct=True, weight=weight)


def test_outcome_targets_label_the_final_step_or_every_step_with_the_answers_verdict():
    right = OutcomeSolution("p", "problem", ("a", "b", "c"), correct=True, weight=0.5)
    wrong = OutcomeSolution("p", "problem", ("a", "b"), correct=False)
    assert outcome_example(right).labels == (None, None, POSITIVE)
    assert outcome_example(wrong).labels == (None, NEGATIVE)
    assert outcome_example(right, "every_step", weight=0.4).labels == (POSITIVE,) * 3
    assert outcome_example(right, "every_step", weight=0.4).weights == pytest.approx((0.2,) * 3)
    assert outcome_example(wrong, "every_step").labels == (NEGATIVE, NEGATIVE)
    # Human labels keep weight 1; an outcome label of weight 0 is no label at all.
    mixed = training_examples([*keyword_solutions(1, seed=1), wrong], outcome_weight=0.0)
    assert [example.source for example in mixed] == ["human"]


def test_balanced_class_weights_count_a_label_by_its_weight():
    sequences = [
        LabeledSequence((1, 2, 3), (1, 2), (POSITIVE, POSITIVE), (1, 2)),
        # Four negative outcome labels of weight 0.25 count as one negative label.
        LabeledSequence((1, 2), (1,), (NEGATIVE,), (1,), (0.25,)),
        LabeledSequence((1, 2), (1,), (NEGATIVE,), (1,), (0.25,)),
        LabeledSequence((1, 2, 3), (1, 2), (NEGATIVE, NEGATIVE), (1, 2), (0.25, 0.25)),
    ]
    weights = class_weights(sequences, 3)
    assert weights.tolist() == pytest.approx([1.5, 0.0, 0.75])


def test_two_weighted_copies_cost_the_soft_target_cross_entropy(tiny_prm):
    model, tokenizer = tiny_prm
    steps = ("we add both sides", "so the answer is 4")
    soft = [0.8, 0.3, 1.0]  # P(answer right) per solution
    copies = [
        OutcomeSolution(f"p{i}", f"problem {i}", steps, correct=correct, weight=p if correct else 1 - p)
        for i, p in enumerate(soft)
        for correct in (True, False)
    ]
    encoder = model.step_encoder(tokenizer)
    # The copy of weight 0 (wrong, p = 1) carries no label; the others carry one each.
    sequences = encode_examples(encoder, training_examples(copies))
    assert len(sequences) == 5
    batch = TrainingCollator(pad_id=encoder.pad_id)(sequences)
    single = TrainingCollator(pad_id=encoder.pad_id)(
        encode_examples(encoder, [outcome_example(copies[2 * i]) for i in range(len(soft))])
    )
    model.eval()
    with torch.no_grad():
        loss = model(**batch).loss
        logits = model(**single).logits.float()
    assert loss is not None
    log_p = torch.log_softmax(logits, dim=-1)
    target = torch.zeros_like(log_p)
    target[:, POSITIVE] = torch.tensor(soft)
    target[:, NEGATIVE] = 1 - torch.tensor(soft)
    expected = -(target * log_p).sum(dim=-1).mean()
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    # And the same identity with the soft targets as F.cross_entropy's probabilities.
    assert float(loss) == pytest.approx(float(F.cross_entropy(logits, target)), rel=1e-5)


def _head(result: TrainResult) -> dict[str, torch.Tensor]:
    return load_file(str(result.final_dir / "head.safetensors"))


@pytest.mark.parametrize("freeze_layers", [99, 0], ids=["head only", "fine-tune"])
def test_outcome_labels_at_weight_zero_change_nothing_and_at_a_positive_weight_change_the_prm(tmp_path, freeze_layers):
    human = keyword_solutions(48, seed=8)
    validation = keyword_solutions(12, seed=9)
    outcome = outcome_solutions(48, seed=10)
    mixed = [item for pair in zip(human, outcome, strict=True) for item in pair]
    options = dict(freeze_layers=freeze_layers, num_epochs=2)

    alone = train_prm(human, tiny_config(tmp_path / "alone", **options), validation=validation)
    ignored = train_prm(mixed, tiny_config(tmp_path / "zero", outcome_weight=0.0, **options), validation=validation)
    used = train_prm(
        mixed,
        tiny_config(tmp_path / "half", outcome_weight=0.5, outcome_targets="every_step", **options),
        validation=validation,
    )
    for name, tensor in _head(alone).items():
        assert torch.equal(tensor, _head(ignored)[name]), name
    assert not torch.equal(_head(alone)["weight"], _head(used)["weight"])
    assert (alone.human_labels, alone.outcome_labels) == (144, 0)
    assert (ignored.human_labels, ignored.outcome_labels) == (144, 0)
    assert (used.human_labels, used.outcome_labels) == (144, 144)
    assert used.hyperparameters["outcome_weight"] == 0.5
    assert used.hyperparameters["outcome_targets"] == "every_step"
    assert used.hyperparameters["objective"] == "process"
    # Validated and calibrated on the human labels, as a PRM.
    assert used.val_labeled_steps == alone.val_labeled_steps == 36


def test_a_step_example_keeps_one_label_and_weight_per_step():
    with pytest.raises(ValueError, match="1 weights for 2 steps"):
        StepExample("p", "problem", ("a", "b"), (POSITIVE, None), weights=(1.0,))
