"""Selectors: solutions chosen by what they are, for the commands that grade and score
them (``--split``, ``--problem``, ``--generation``, id ranges)."""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Exists, OuterRef, Q

from labeling.models import Solution, SolutionQuerySet, Task


def never_graded_q() -> Q:
    """Solutions no grading has looked at: every grading writes a note, also "no answer
    found" and "no reference answer", which leave ``is_correct`` null."""
    return Q(is_correct__isnull=True, grading_note="")


def solutions_matching(
    *,
    splits: Sequence[str] = (),
    problem_ids: Sequence[str] = (),
    generations: Sequence[int] = (),
    first_id: int | None = None,
    last_id: int | None = None,
) -> SolutionQuerySet:
    """Solutions with steps (not phase-1 placeholders) that match every filter given.

    ``splits``: the problem's ``Problem.split``. ``problem_ids``: ``Problem.unique_id``
    values; one ending in ``*`` is a prefix (``champ/*``). ``generations``:
    ``Generation.number`` values; a solution belongs to a generation when it was served
    there as a task.
    """
    queryset = Solution.objects.with_steps()
    if splits:
        queryset = queryset.filter(problem__split__in=splits)
    if problem_ids:
        # Exact ids as one IN: a chain of a thousand ORs is past SQLite's expression depth.
        exact = [problem for problem in problem_ids if not problem.endswith("*")]
        match = Q(problem__unique_id__in=exact) if exact else Q()
        for problem in problem_ids:
            if problem.endswith("*"):
                match |= Q(problem__unique_id__startswith=problem[:-1])
        queryset = queryset.filter(match)
    if generations:
        # EXISTS rather than a join: a solution served in several generations stays one row.
        queryset = queryset.filter(
            Exists(Task.objects.filter(solution_id=OuterRef("pk"), generation__number__in=generations))
        )
    if first_id is not None:
        queryset = queryset.filter(id__gte=first_id)
    if last_id is not None:
        queryset = queryset.filter(id__lte=last_id)
    return queryset


def solution_texts(*, splits: Sequence[str] = (), problem_ids: Sequence[str] = ()) -> list[tuple[str, list[str], str]]:
    """(problem text, steps, content_sha256) of the matching solutions with steps, by id:
    the unlabeled text continued LM training reads (``activelearn.prm.adaptation``)."""
    rows = solutions_matching(splits=splits, problem_ids=problem_ids).order_by("id")
    # solutions_matching leaves out phase-1 placeholders (steps null).
    return [
        (problem, list(steps or ()), sha)
        for problem, steps, sha in rows.values_list("problem__problem", "steps", "content_sha256")
    ]
