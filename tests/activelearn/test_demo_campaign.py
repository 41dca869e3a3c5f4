"""The demo campaign: a new labeler is screened on CHAMP's real human annotations and then
gets normal work; the served solutions are graded; the demo has labels to train on."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from activelearn.checkpoints.training_data import training_set_build
from activelearn.demo import demo_campaign_load, demo_solutions_to_grade
from labeling.labelers import labeler_for_user
from labeling.models import GoldStep, LabelerStatus, Solution, Task, TaskKind, TaskStatus
from labeling.quality.control import screening_set_ids
from tests.labeling.gold_factories import label, next_for

PROBLEMS = 40  # 80 annotations: the 30 screening items, 20 QC items and 30 labeled solutions


@pytest.fixture(autouse=True)
def _fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _gold_ratings(solution: Solution) -> list[int]:
    """The ratings a careful labeler gives: +1 up to the annotated error, -1 there (or +1 throughout)."""
    rows = list(GoldStep.objects.filter(solution=solution).order_by("step_index"))
    error = next((row.step_index for row in rows if row.negative_ok), None)
    return [1] * len(rows) if error is None else [1] * error + [-1]


@pytest.mark.django_db
def test_a_labeler_the_admin_creates_is_screened_on_real_items_and_then_gets_normal_work():
    result = demo_campaign_load(
        solutions_per_problem=2, admin_password="a", labeler_password="l", problems=PROBLEMS, grade=False
    )
    assert (result.screening_items, result.quality_control_items, result.gold_created) == (30, 20, 50)
    screening = Task.objects.filter(pk__in=screening_set_ids()).select_related("solution")
    assert screening.count() == 30
    assert all(t.solution.generator.startswith("champ-dataset") for t in screening)

    user = get_user_model().objects.create_user(username="new-labeler", password="x")
    labeler = labeler_for_user(user=user)
    assert labeler.status == LabelerStatus.SCREENING
    for _ in range(30):
        assignment = next_for(labeler)
        assert assignment.task.kind == TaskKind.SCREENING
        label(assignment, _gold_ratings(assignment.task.solution))
    work = next_for(labeler)
    labeler.refresh_from_db()
    assert labeler.status == LabelerStatus.ACTIVE
    assert work.task.kind in (TaskKind.NORMAL, TaskKind.QUALITY_CONTROL)
    assert work.task.generation.number == 0


@pytest.mark.django_db
def test_the_demo_has_human_labels_to_train_on_and_keeps_a_pool():
    result = demo_campaign_load(
        solutions_per_problem=4, admin_password="a", labeler_password="l", problems=PROBLEMS, grade=False
    )
    training = training_set_build()
    # Every annotation not kept as gold (two annotations of one text are one solution).
    assert training.solutions == result.data.labeled_created >= 25
    assert len(result.data.gold) == 50
    assert Solution.objects.exclude(tasks__isnull=False).exists()


@pytest.mark.django_db
def test_the_served_solutions_and_the_default_pool_are_graded_by_the_product_grader():
    result = demo_campaign_load(solutions_per_problem=3, admin_password="a", labeler_password="l", problems=2)
    assert result.graded > 0
    served = Solution.objects.filter(tasks__isnull=False).distinct()
    assert served.exists()
    # Every served solution has a verdict or the reason it has none.
    assert not served.filter(is_correct__isnull=True, grading_note="").exists()
    assert demo_solutions_to_grade() == []
    assert Task.objects.filter(status=TaskStatus.OPEN, kind=TaskKind.NORMAL).count() == 2 * 2
