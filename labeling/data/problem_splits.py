"""Services: assign problems to train / validation / test splits, reproducibly.

A problem's split is a function of its ``unique_id`` and a seed alone (sha256, not
``hash()``): re-running with the same seed gives the same split on any machine, and
adding problems later never moves the ones already assigned, so a model retrained on a
grown data set never trains on a problem it was tested on before. The fractions are
met in expectation, not exactly (each problem draws independently).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from labeling.models import Problem, Split


class SplitRequestError(ValueError):
    """The fractions or the problem selection are unusable; the message says why."""


@dataclass(frozen=True)
class SplitResult:
    counts: dict[str, int]  # split -> problems now in it (of those selected)
    changed: int  # problems whose split this call changed


def problem_split_for(*, unique_id: str, seed: int, validation: float, test: float) -> str:
    """The split of one problem: test below ``test``, validation below ``test + validation``."""
    digest = hashlib.sha256(f"problem-split:{seed}:{unique_id}".encode()).digest()
    draw = int.from_bytes(digest[:8], "big") / 2**64
    if draw < test:
        return Split.TEST
    if draw < test + validation:
        return Split.VALIDATION
    return Split.TRAIN


def problems_split_assign(
    *,
    seed: int,
    validation: float,
    test: float,
    prefix: str | None = None,
    problem_ids: Sequence[str] | None = None,
    dry_run: bool = False,
) -> SplitResult:
    """Set ``Problem.split`` for the problems whose unique_id starts with ``prefix`` (or
    is in ``problem_ids``; all problems when neither is given) and return the counts."""
    for name, value in (("validation", validation), ("test", test)):
        if not 0.0 <= value <= 1.0:
            raise SplitRequestError(f"--{name} must lie in [0, 1], got {value}")
    if validation + test > 1.0:
        raise SplitRequestError(f"--validation + --test must be at most 1, got {validation + test}")
    problems = Problem.objects.all()
    if prefix:
        problems = problems.filter(unique_id__startswith=prefix)
    if problem_ids is not None:
        problems = problems.filter(unique_id__in=problem_ids)
        missing = set(problem_ids) - set(problems.values_list("unique_id", flat=True))
        if missing:
            raise SplitRequestError(f"no problem with unique_id {', '.join(sorted(missing)[:5])}")
    current = list(problems.values_list("pk", "unique_id", "split"))
    if not current:
        raise SplitRequestError("no problem matches the selection")
    wanted: dict[str, list[int]] = {}
    changed = 0
    for pk, unique_id, split in current:
        target = problem_split_for(unique_id=unique_id, seed=seed, validation=validation, test=test)
        wanted.setdefault(target, []).append(pk)
        changed += target != split
    if not dry_run:
        with transaction.atomic():
            # One UPDATE per split (3 statements) instead of one per problem.
            for split, pks in wanted.items():
                for start in range(0, len(pks), 5000):
                    Problem.objects.filter(pk__in=pks[start : start + 5000]).update(split=split)
    counts = Counter({split: len(pks) for split, pks in wanted.items()})
    return SplitResult(
        counts={s: counts.get(s, 0) for s in (Split.TRAIN, Split.VALIDATION, Split.TEST)}, changed=changed
    )
