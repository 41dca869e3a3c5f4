"""The CHAMP benchmark's command line: what it refuses, and the command it writes into the docs."""

from typing import Any

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


@pytest.mark.slow
def test_a_resumed_run_grades_evaluates_and_writes_its_report(tmp_path):
    """``--resume`` on the database of an interrupted run: it used to stop with an
    UnboundLocalError after evaluate_prm, before writing anything."""
    import json
    import subprocess
    import sys

    from benchmarks.prm_champ import ROOT, _env, _manage

    workdir = tmp_path / "run"
    workdir.mkdir()
    env = _env(workdir)
    _manage(env, "migrate", "--no-input")
    _manage(env, "load_demo", "--solutions-per-problem=0", "--problems=30")
    _manage(env, "split_problems", "--prefix=champ/", "--seed=0", "--validation=0.3", "--test=0.3")
    labels = workdir / "labels.jsonl"
    subprocess.run(
        [sys.executable, "-c", RECORDS_SCRIPT, str(labels)], env={**env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, check=True
    )
    _manage(env, "import_prm800k", str(labels))
    _manage(env, "train_prm", "--backbone=tiny:bert", "--split=train", "--validation-split=validation", "--epochs=1")

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "prm_champ.py"), "--resume", "--skip-scoring",
         "--workdir", str(workdir), "--n", "1"],
        env=env, cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-2000:]
    assert "| test |" in (workdir / "report.md").read_text()
    assert set(json.loads((workdir / "results.json").read_text())) == {"validation", "test"}


# The CHAMP records of the problems in the database, as the benchmark writes them.
RECORDS_SCRIPT = """
import json, sys
from benchmarks.prm_champ import _django, _env, champ_records
from pathlib import Path
import os
_django(dict(os.environ))
from labeling.models import Problem
problems = {
    uid: {"problem": text, "solution": solution, "answer": answer, "split": split}
    for uid, text, solution, answer, split in Problem.objects.values_list(
        "unique_id", "problem", "solution", "answer", "split"
    )
}
records, _ = champ_records(problems)
Path(sys.argv[1]).write_text("".join(json.dumps(r) + "\\n" for r in records))
"""


def _evaluation(bo4: dict[str, Any], bo16: dict[str, Any], aggregation: str = "min") -> dict[str, Any]:
    return {"best_of_n": {"4": bo4, "16": bo16}, "aggregation": aggregation}


def test_the_seeds_study_picks_with_the_checkpoints_own_aggregation_and_never_looks_at_test():
    from benchmarks.prm_champ_seeds import _pick

    # The checkpoint chose "last" in training (on the validation pool); on test "min" would
    # win, and the pick must not follow it.
    test = {"prm_min": 0.70, "prm_last": 0.45, "prm_last_ci": [0.3, 0.6], "majority": 0.5}
    entry = {"validation": _evaluation({"prm_min": 0.60}, {}), "test": _evaluation({}, test, aggregation="last")}
    value, interval, _, name = _pick("PRM", entry, "16")
    assert (name, value, interval) == ("last", 0.45, [0.3, 0.6])
    assert _pick("ORM, equal solutions", {**entry, "test": _evaluation({}, {"prm_last": 0.3})}, "16")[3] == "last"


def test_the_seeds_study_says_a_goal_is_not_met_when_one_seed_misses_it():
    from benchmarks.prm_champ_seeds import goals

    def arm(pick: float, f1: float) -> dict[str, Any]:
        test = {
            "best_of_n": {"16": {"prm_min": pick, "weighted": pick - 0.1, "majority": 0.5}},
            "step_auroc": 0.7,
            "first_error": {"f1": f1},
            "first_error_baselines": {"random_at_prior": {"f1": 0.1}},
        }
        return {"validation": {"best_of_n": {"4": {"prm_min": 0.5}}}, "test": test}

    entries = {"PRM": [arm(0.6, 0.35), arm(0.45, 0.31)], "ORM, equal solutions": [arm(0.4, 0.2), arm(0.4, 0.2)]}
    lines = "\n".join(goals(entries, [e["test"] for e in entries["PRM"]], "16"))
    assert "0.600 / 0.450 against 0.500 / 0.500: **not met** on every seed" in lines
    assert "0.350 / 0.310: **met**" in lines
    assert "step AUROC ≥ 0.80: 0.700 / 0.700: **not met**" in lines
