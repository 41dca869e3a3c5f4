"""CHAMP read once per test process and per solutions cap: splitting its 19,440 solutions
is most of a demo load's time, and every demo test loads the same dataset."""

from __future__ import annotations

from labeling.data import demo

_READ_CHAMP = demo.read_champ
_read: dict[int | None, list[demo.DemoProblem]] = {}


def read_champ_once(*, solutions_per_problem: int | None, limit_problems: int | None = None) -> list[demo.DemoProblem]:
    """``demo.read_champ`` with its result kept: the same problems, in the same order."""
    if solutions_per_problem not in _read:
        _read[solutions_per_problem] = _READ_CHAMP(solutions_per_problem=solutions_per_problem)
    return _read[solutions_per_problem][:limit_problems]
