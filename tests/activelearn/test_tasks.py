import time

import pytest

from activelearn.checkpoints.runs import checkpoint_train
from activelearn.models import SolutionScore
from activelearn.tasks import score_chunk_task

from .label_factories import TINY_CONFIG, keyword_labels


@pytest.mark.celery_worker
@pytest.mark.slow
def test_a_worker_process_scores_a_chunk_of_solutions(celery_worker_process, settings, tmp_path):
    settings.CHECKPOINT_DIR = tmp_path / "checkpoints"
    built = keyword_labels(6, seed=9)
    checkpoint = checkpoint_train(
        base_model="tiny:bert", through_generation=None, config={**TINY_CONFIG, "max_steps": 1}
    )
    ids = sorted(b.solution.pk for b in built)

    score_chunk_task.apply_async(args=[checkpoint.pk, ids[1], ids[4]], queue=celery_worker_process.queue)

    # A worker loading torch and the model on a busy machine can take a minute before it scores.
    deadline = time.monotonic() + 180
    while SolutionScore.objects.filter(checkpoint=checkpoint).count() < 4:
        assert time.monotonic() < deadline, celery_worker_process.output()
        time.sleep(0.3)
    assert sorted(SolutionScore.objects.values_list("solution_id", flat=True)) == ids[1:5]


def test_the_tasks_are_routed_to_their_queues(settings):
    from annotate.celery import app

    routes = {name: app.amqp.router.route({}, name)["queue"].name for name in settings.CELERY_TASK_ROUTES}
    assert routes == {
        "activelearn.tasks.train_checkpoint_task": "gpu",
        "activelearn.tasks.score_chunk_task": "gpu",
        "activelearn.tasks.grade_chunk_task": "cpu",
        "activelearn.tasks.evaluate_checkpoint_task": "cpu",
        "activelearn.tasks.generation_train_task": "gpu",
        "activelearn.tasks.generation_score_chunk_task": "gpu",
        "activelearn.tasks.generation_sample_task": "cpu",
        "activelearn.tasks.generation_sample_chunk_task": "cpu",
        "activelearn.tasks.generation_prepare_task": "cpu",
        "activelearn.tasks.generation_grade_task": "cpu",
        "activelearn.tasks.generation_select_task": "cpu",
        "activelearn.tasks.pipeline_reconcile_task": "cpu",
        "activelearn.tasks.pipeline_cadence_task": "cpu",
    }


def test_enqueueing_never_loads_torch_in_the_web_process():
    import subprocess
    import sys

    code = (
        "import django, sys; django.setup(); "
        "import activelearn.tasks, activelearn.generations.pipeline, activelearn.generations.steps, "
        "activelearn.generations.reconciler, activelearn.checkpoints.runs, activelearn.checkpoints.scoring, "
        "activelearn.grading.service, activelearn.checkpoints.evaluation, activelearn.checkpoints.training_data; "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
