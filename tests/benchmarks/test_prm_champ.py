"""The CHAMP benchmark's command line: what it refuses, and the command it writes into the docs."""

import pytest

from benchmarks.prm_champ import main, shown_command


@pytest.mark.parametrize(
    "argv",
    [
        ["--workdir", "/tmp/run", "--resume", "--write-docs"],
        ["--workdir=/tmp/run", "--resume", "--write-docs"],
        ["--write-docs", "--resume", "--workdir", "/tmp/run"],
    ],
)
def test_the_documented_command_leaves_out_the_local_work_directory_in_either_spelling(argv):
    assert shown_command(argv) == "python benchmarks/prm_champ.py --resume"


def test_the_documented_command_keeps_every_other_option_in_order():
    argv = ["--pool", "20", "--train-option", "freeze_layers=4", "--workdir", "w", "--n", "16"]
    assert shown_command(argv) == "python benchmarks/prm_champ.py --pool 20 --train-option freeze_layers=4 --n 16"


def test_skipping_the_scoring_without_resuming_is_refused_before_anything_is_touched(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--workdir", str(tmp_path / "run"), "--skip-scoring"])
    assert stopped.value.code == 2
    assert "--skip-scoring needs --resume" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
