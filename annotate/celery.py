"""The Celery app, the one way to declare a task, and the one way to send one.

Every task lives in its app's ``tasks.py`` (found by autodiscovery), is
declared with ``task`` and is thin: it takes ids, loads, calls one service.
Work is sent with ``send_after_commit``, by task name, once the transaction
that asked for it has committed.
"""

import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ParamSpec, Protocol, TypeVar, cast

from celery import Celery, shared_task
from django.db import transaction

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "annotate.settings")

app = Celery("annotate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

P = ParamSpec("P")
R = TypeVar("R", covariant=True)


class DeclaredTask(Protocol[P, R]):
    """A declared task: calling it runs it in this process; ``apply_async`` queues it."""

    name: str

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def apply_async(
        self, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None, **options: Any
    ) -> Any: ...


def task(*, name: str | None = None) -> Callable[[Callable[P, R]], DeclaredTask[P, R]]:
    """Declare a Celery task, typed (Celery ships no type information).

    ``acks_late`` + ``reject_on_worker_lost``: a worker that dies mid-task
    leaves the message to be redelivered, so every task must be safe to run
    again. ``name`` keeps the registered name of a task that moved: names are
    in messages already queued and in the beat schedule.
    """

    def declare(function: Callable[P, R]) -> DeclaredTask[P, R]:
        options: dict[str, Any] = {"acks_late": True, "reject_on_worker_lost": True}
        if name is not None:
            options["name"] = name
        return cast(DeclaredTask[P, R], shared_task(**options)(function))

    return declare


def send_after_commit(
    name: str, *, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, **options: Any
) -> None:
    """Queue task ``name`` once the current transaction commits (at once outside one).

    After commit: a worker must find the rows this transaction wrote, and must
    not run for a transaction that rolled back. By name: the sender needs no
    import of the task's module (the web process never loads a worker's
    dependencies, and labeling asks activelearn for work without importing
    it). ``options`` are Celery's (queue, soft_time_limit, time_limit).
    """
    # A partial, not a lambda, so that tests can read what was queued from the
    # captured on-commit callbacks.
    transaction.on_commit(partial(_send, name, tuple(args), dict(kwargs or {}), options))


def _send(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], options: dict[str, Any]) -> None:
    if app.conf.task_always_eager:
        # send_task ignores eager mode; run the task here, as apply_async would.
        # Autodiscovery imports the tasks modules only when asked.
        app.loader.import_default_modules()
        app.tasks[name].apply_async(args, kwargs, **options)
        return
    app.send_task(name, args=args, kwargs=kwargs, **options)
