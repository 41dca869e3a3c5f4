"""Labeler records for signed-in users, and who may take work."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from labeling.models import Labeler, LabelerStatus

# The statuses that may be handed normal work. The screening gate (a later
# piece of work) narrows this to ACTIVE and serves screening items to the rest.
_MAY_TAKE_WORK = frozenset({LabelerStatus.SCREENING, LabelerStatus.ACTIVE})


def labeler_for_user(*, user: AbstractBaseUser) -> Labeler:
    """The user's Labeler, created on first visit (status: the model default)."""
    # get_or_create retries the get after an IntegrityError, so two first
    # requests of the same user at the same moment end with one row.
    labeler, _created = Labeler.objects.get_or_create(user=user)
    return labeler


def labeler_can_take_work(labeler: Labeler) -> bool:
    """The one place that decides whether a labeler is handed tasks."""
    return labeler.status in _MAY_TAKE_WORK
