"""Selectors: solutions chosen by what they are, for the commands that grade, score and
evaluate them (``--split``, ``--problem``, ``--generation``, id ranges)."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Q, QuerySet

from labeling.models import Generation, Solution, Split


class SelectionError(ValueError):
    """A selection that names something that does not exist; the message says what."""


def never_graded_q() -> Q:
    """Solutions no grading has looked at: every grading writes a note, also "no answer
    found" and "no reference answer", which leave ``is_correct`` null."""
    return Q(is_correct__isnull=True, grading_note="")


def solutions_matching(
    *,
    split: str | None = None,
    problems: Sequence[str] = (),
    generations: Sequence[int] = (),
    first_id: int | None = None,
    last_id: int | None = None,
) -> QuerySet[Solution]:
    """Solutions with steps (not phase-1 placeholders) that match every filter given.

    ``problems``: ``Problem.unique_id`` values; one ending in ``*`` is a prefix
    (``champ/*``). ``generations``: ``Generation.number`` values; a solution belongs to a
    generation when it was served there as a task. ``split``: the problem's split.
    """
    queryset = Solution.objects.filter(steps__isnull=False)
    if split is not None:
        if split not in Split.values or split == Split.UNSPECIFIED:
            raise SelectionError(f"split must be one of train, test; got {split!r}")
        queryset = queryset.filter(problem__split=split)
    if problems:
        match = Q()
        for problem in problems:
            prefix = problem.endswith("*")
            match |= Q(problem__unique_id__startswith=problem[:-1]) if prefix else Q(problem__unique_id=problem)
        queryset = queryset.filter(match)
    if generations:
        known = set(Generation.objects.filter(number__in=generations).values_list("number", flat=True))
        unknown = sorted(set(generations) - known)
        if unknown:
            raise SelectionError(f"no generation numbered {', '.join(str(n) for n in unknown)}")
        queryset = queryset.filter(tasks__generation__number__in=generations).distinct()
    if first_id is not None:
        queryset = queryset.filter(id__gte=first_id)
    if last_id is not None:
        queryset = queryset.filter(id__lte=last_id)
    return queryset
