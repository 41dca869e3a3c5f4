from django.core.management.base import CommandError

from activelearn.models import CheckpointStatus, PRMCheckpoint


def ready_checkpoint(checkpoint_id: int | None) -> PRMCheckpoint:
    """The given checkpoint, or the newest READY one; CommandError when unusable."""
    if checkpoint_id is None:
        checkpoint = PRMCheckpoint.objects.filter(status=CheckpointStatus.READY).order_by("-id").first()
        if checkpoint is None:
            raise CommandError("no ready checkpoint: train one with train_prm first")
        return checkpoint
    try:
        checkpoint = PRMCheckpoint.objects.get(pk=checkpoint_id)
    except PRMCheckpoint.DoesNotExist:
        raise CommandError(f"no checkpoint with id {checkpoint_id}") from None
    if checkpoint.status != CheckpointStatus.READY:
        raise CommandError(f"checkpoint {checkpoint_id} is {checkpoint.status}, not ready")
    return checkpoint
