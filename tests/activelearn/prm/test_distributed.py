"""Training over several processes (gloo on the CPU): FSDP gives the one-process result."""

import pytest
import torch
from safetensors.torch import load_file

from activelearn.prm.distributed import train
from activelearn.prm.modeling import ProcessRewardModel

from .conftest import keyword_solutions, tiny_config

# tiny:llama has no dropout, so both runs draw the same numbers; two micro-batches a step
# on one process are one micro-batch on each of two.
COMMON = dict(backbone="tiny:llama", batch_size=8, num_epochs=2, learning_rate=1e-3, cpu=True, adapter="full")


@pytest.mark.slow
def test_two_sharded_processes_give_the_loss_curve_and_model_of_one(tmp_path):
    data, validation = keyword_solutions(32, seed=3), keyword_solutions(8, seed=4)
    one = train(data, tiny_config(tmp_path / "one", gradient_accumulation_steps=2, **COMMON), validation=validation)
    steps = []
    two = train(
        data,
        tiny_config(tmp_path / "two", processes=2, checkpoint_every=2, **COMMON),
        validation=validation,
        progress=lambda step, total, loss: steps.append((step, total)),
        run_id="parity",
    )

    assert two.memory is not None and two.memory["full"]["sharded"] and two.memory["full"]["processes"] == 2
    assert (tmp_path / "two" / "checkpoint-00000002" / "pytorch_model_fsdp_0").is_dir()  # each process its shard
    assert steps == [(step, 4) for step in range(1, 5)]  # replayed from the main process
    assert [s for s, _ in two.train_loss_curve] == [s for s, _ in one.train_loss_curve] == [1, 2, 3, 4]
    assert [v for _, v in two.train_loss_curve] == pytest.approx([v for _, v in one.train_loss_curve], rel=1e-4)
    assert two.val_loss == pytest.approx(one.val_loss, rel=1e-4)
    assert two.calibration is not None and one.calibration is not None
    assert two.calibration["threshold"] == pytest.approx(one.calibration["threshold"], abs=1e-4)
    # The gathered weights were saved whole, as one process saves them.
    for part in ("head.safetensors", "backbone/model.safetensors"):
        a, b = load_file(str(one.final_dir / part)), load_file(str(two.final_dir / part))
        assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a), part
    ProcessRewardModel.from_pretrained(two.final_dir)
