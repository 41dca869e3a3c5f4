"""``label.steps`` of PRM800K records, built from the LabeledStep and StepRating rows.

An assignment's label is frozen into ``Assignment.label_steps_json`` when it is
submitted (labeling.work.assignment); the export rebuilds it from the rows for
assignments submitted before labels were frozen.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import orjson

from labeling.models import LabeledStep, StepRating


def label_steps_for(assignment_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    """``label.steps`` of each assignment, built from its LabeledStep and StepRating rows."""
    steps: dict[int, list[dict[str, Any]]] = defaultdict(list)
    if not assignment_ids:
        return steps
    entries: dict[int, list[dict[str, Any]]] = {}
    for step_id, assignment_id, chosen, human in (
        LabeledStep.objects.filter(assignment_id__in=assignment_ids)
        .order_by("assignment_id", "index")
        .values_list("id", "assignment_id", "chosen_completion", "human_completion")
    ):
        completions: list[dict[str, Any]] = []
        entries[step_id] = completions
        steps[assignment_id].append(
            {"completions": completions, "human_completion": human, "chosen_completion": chosen}
        )
    for step_id, text, rating, flagged in (
        StepRating.objects.filter(step__assignment_id__in=assignment_ids)
        .order_by("step_id", "completion_index")
        .values_list("step_id", "text", "rating", "flagged")
    ):
        entries[step_id].append({"text": text, "rating": rating, "flagged": flagged})
    return steps


def label_steps_freeze(*, assignment_id: int) -> str:
    """The JSON to store in ``Assignment.label_steps_json`` when it is submitted."""
    return orjson.dumps(label_steps_for([assignment_id]).get(assignment_id, [])).decode()
