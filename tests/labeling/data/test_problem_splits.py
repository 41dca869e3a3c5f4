"""The seeded train / validation / test split of problems."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from labeling.data.problem_splits import problem_split_for
from labeling.models import Problem, Split, text_sha256

pytestmark = pytest.mark.django_db


def _problems(prefix: str, count: int) -> list[str]:
    ids = [f"{prefix}{i}" for i in range(count)]
    Problem.objects.bulk_create(
        Problem(unique_id=uid, problem=f"text {uid}", problem_sha256=text_sha256(f"text {uid}")) for uid in ids
    )
    return ids


def test_it_splits_reproducibly_and_never_moves_a_problem_when_others_are_added(capsys: pytest.CaptureFixture[str]):
    first = _problems("champ/P_", 300)
    _problems("other/", 5)
    call_command("split_problems", "--prefix=champ/", "--validation=0.2", "--test=0.3", "--seed=7")
    assert "changed 300" in capsys.readouterr().out
    splits = dict(Problem.objects.filter(unique_id__in=first).values_list("unique_id", "split"))
    counts = {s: list(splits.values()).count(s) for s in (Split.TRAIN, Split.VALIDATION, Split.TEST)}
    # Independent draws: the shares are met in expectation (here within 5 points).
    assert abs(counts[Split.TEST] / 300 - 0.3) < 0.05 and abs(counts[Split.VALIDATION] / 300 - 0.2) < 0.05
    assert set(Problem.objects.filter(unique_id__startswith="other/").values_list("split", flat=True)) == {""}

    _problems("champ/Q_", 50)
    call_command("split_problems", "--prefix=champ/", "--validation=0.2", "--test=0.3", "--seed=7")
    assert "changed 50" in capsys.readouterr().out  # only the new ones
    assert dict(Problem.objects.filter(unique_id__in=first).values_list("unique_id", "split")) == splits
    assert splits["champ/P_0"] == problem_split_for(unique_id="champ/P_0", seed=7, validation=0.2, test=0.3)


def test_another_seed_gives_another_split_and_a_dry_run_changes_nothing(capsys: pytest.CaptureFixture[str]):
    ids = _problems("champ/P_", 100)
    call_command("split_problems", "--seed=1", "--dry-run")
    assert "would change" in capsys.readouterr().out
    assert set(Problem.objects.values_list("split", flat=True)) == {""}
    one = [problem_split_for(unique_id=u, seed=1, validation=0.2, test=0.2) for u in ids]
    two = [problem_split_for(unique_id=u, seed=2, validation=0.2, test=0.2) for u in ids]
    assert one != two


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--validation=0.6", "--test=0.5"], "at most 1"),
        (["--test=-0.1"], r"--test must lie in \[0, 1\]"),
        (["--problem=nope"], "no problem with unique_id nope"),
        (["--prefix=missing/"], "no problem matches"),
    ],
)
def test_it_refuses_unusable_requests(args: list[str], message: str) -> None:
    _problems("champ/P_", 3)
    with pytest.raises(CommandError, match=message):
        call_command("split_problems", *args)
