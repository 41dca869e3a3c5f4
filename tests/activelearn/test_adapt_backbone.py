"""``manage.py adapt_backbone``: continued LM training on the unlabeled solutions of a split."""

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from activelearn.models import CheckpointStatus, PRMCheckpoint
from activelearn.prm.adaptation import ADAPTATION_FILE
from labeling.models import Problem, Solution
from tests.activelearn import label_factories as make
from tests.activelearn.label_factories import keyword_labels
from tests.activelearn.prm.test_adaptation import tied_llama

pytestmark = pytest.mark.django_db


def _problems(split: str, count: int) -> None:
    for index in range(count):
        problem = make.problem()
        Problem.objects.filter(pk=problem.pk).update(split=split)
        make.solution(of=problem, steps=[f"we add {index} and 1", f"so it is {index + 1}"], final_answer=str(index + 1))


def test_adapts_on_the_splits_solutions_only_and_reports_the_held_out_loss(tmp_path):
    _problems("train", 12)
    _problems("test", 5)
    make.solution(of=make.problem(), steps=None)  # a phase-1 placeholder has no text to train on
    out = StringIO()
    call_command(
        "adapt_backbone", f"--backbone={tied_llama(tmp_path / 'lm')}", "--split=train", f"--output={tmp_path / 'a'}",
        "--max-steps=3", "--batch-size=2", "--max-length=64", "--heldout-share=0.3", stdout=out, stderr=StringIO(),
    )  # fmt: skip
    record = json.loads((tmp_path / "a" / ADAPTATION_FILE).read_text())
    assert record["solutions"] == 12
    assert record["heldout_windows"] > 0
    assert f"adapted backbone written to {tmp_path / 'a'}: 12 solutions" in out.getvalue()
    assert "held-out LM loss" in out.getvalue()


def test_refusals_are_command_errors_that_write_nothing(tmp_path):
    with pytest.raises(CommandError, match="no solutions"):
        call_command("adapt_backbone", "--backbone=tiny:llama", "--split=train", f"--output={tmp_path / 'a'}")
    _problems("train", 2)
    with pytest.raises(CommandError, match="tie_word_embeddings"):
        call_command("adapt_backbone", "--backbone=tiny:llama", "--split=train", f"--output={tmp_path / 'a'}")
    with pytest.raises(CommandError, match="is not"):
        call_command("adapt_backbone", f"--backbone={tmp_path / 'none'}", f"--output={tmp_path / 'a'}")
    assert not (tmp_path / "a").exists()


@pytest.fixture
def checkpoint_dir(settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path / "checkpoints"
    return settings.CHECKPOINT_DIR


def _train(backbone: str, *extra: str) -> PRMCheckpoint:
    call_command(
        "train_prm", f"--backbone={backbone}", "--adapt-steps=3", "--adapt-learning-rate=1e-3", "--epochs=1",
        "--batch-size=8", "--max-length=64", "--val-fraction=0.3", "--seed=1", "--no-progress", *extra,
        stdout=StringIO(), stderr=StringIO(),
    )  # fmt: skip
    return PRMCheckpoint.objects.latest("id")


def test_train_prm_adapts_first_and_reuses_the_adaptation_for_the_same_text(checkpoint_dir, tmp_path):
    keyword_labels(12, seed=1)
    lm = str(tied_llama(tmp_path / "lm"))
    first = _train(lm)
    adapted = Path(first.base_model)
    assert first.status == CheckpointStatus.READY
    assert adapted.parent == checkpoint_dir / "adapted"
    record = json.loads((adapted / ADAPTATION_FILE).read_text())
    assert record["base_model"] == lm and record["config"]["max_steps"] == 3
    assert record["config"]["learning_rate"] == 1e-3
    assert record["solutions"] == Solution.objects.exclude(steps=None).count()
    written = (adapted / ADAPTATION_FILE).stat().st_mtime_ns

    second = _train(lm)
    assert second.base_model == first.base_model
    assert (adapted / ADAPTATION_FILE).stat().st_mtime_ns == written  # not adapted again

    keyword_labels(2, seed=2)  # new text: a new adaptation
    assert _train(lm).base_model != first.base_model


def test_train_prm_refuses_to_adapt_an_encoder_before_creating_a_checkpoint(checkpoint_dir):
    keyword_labels(3, seed=1)
    with pytest.raises(CommandError, match="tie_word_embeddings"):
        _train("tiny:bert")
    assert not PRMCheckpoint.objects.exists()


def test_refuses_an_output_directory_it_did_not_write_and_keeps_its_contents(tmp_path):
    _problems("train", 3)
    other = tmp_path / "other-backbone"
    other.mkdir()
    (other / "README").write_text("keep me")
    (other / "config.json").write_text("{}")
    with pytest.raises(CommandError, match=rf"--output {other} is not empty .* --replace"):
        call_command("adapt_backbone", "--backbone=tiny:llama", "--split=train", f"--output={other}")
    assert (other / "README").read_text() == "keep me"
    assert sorted(p.name for p in other.iterdir()) == ["README", "config.json"]
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    with pytest.raises(CommandError, match="is a file"):
        call_command("adapt_backbone", "--backbone=tiny:llama", "--split=train", f"--output={a_file}")
    assert a_file.read_text() == "x"


def test_replaces_its_own_earlier_output_or_anything_with_replace(tmp_path):
    _problems("train", 6)
    backbone = tied_llama(tmp_path / "lm")
    args = ("--split=train", "--max-steps=1", "--batch-size=2", "--max-length=64", "--heldout-share=0.3")
    out = tmp_path / "a"
    for _ in range(2):  # the second run finds the first one's output and replaces it
        call_command(
            "adapt_backbone", f"--backbone={backbone}", f"--output={out}", *args, stdout=StringIO(), stderr=StringIO()
        )
        assert (out / ADAPTATION_FILE).exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "README").write_text("old")
    call_command(
        "adapt_backbone", f"--backbone={backbone}", f"--output={other}", "--replace", *args,
        stdout=StringIO(), stderr=StringIO(),
    )  # fmt: skip
    assert not (other / "README").exists()
    assert (other / ADAPTATION_FILE).exists()
