"""A Celery-compatible calling surface on the engine: change ``from celery import ...`` to
``from jobsapp.celery import ...`` and Celery-style tasks run on ``runworkers``.

    from jobsapp.celery import shared_task, chain, group, chord, AsyncResult

    @shared_task(bind=True, max_retries=5, autoretry_for=(TimeoutError,), retry_backoff=True)
    def fetch(self, url): ...

    fetch.delay("https://example.com")            # -> AsyncResult
    chord(group(fetch.s(u) for u in urls), merge.s()).apply_async()

Tasks live in an app's ``tasks.py`` (autodiscovered) and are registered as jobs when defined,
under their Celery name (``module.function`` unless ``name=`` says otherwise); results come from
the engine's result store. Celery's module paths are mirrored (``jobsapp.celery.exceptions``,
``.result``, ``.states``, ``.schedules``, ``.utils.log``). What Celery has and this does not is in
docs/celery.md's table: such options are accepted with a one-time ``RuntimeWarning``, or refused
with ``TypeError``.
"""

from . import builtin_tasks as builtin_tasks  # registers celery.map and celery.starmap
from .app import Celery
from .canvas import Signature, chain, chord, chunks, group, maybe_signature, signature, subtask, xmap, xstarmap
from .control import revoke
from .decorators import shared_task, task
from .exceptions import (
    ChordError,
    Ignore,
    MaxRetriesExceededError,
    Reject,
    Retry,
    SoftTimeLimitExceeded,
    TaskFailure,
    TaskRevokedError,
    TimeLimitExceeded,
    TimeoutError,
)
from .result import AsyncResult, EagerResult, GroupResult
from .task import Context, NotRegistered, Task

__all__ = [
    "AsyncResult",
    "Celery",
    "ChordError",
    "Context",
    "EagerResult",
    "GroupResult",
    "Ignore",
    "MaxRetriesExceededError",
    "NotRegistered",
    "Reject",
    "Retry",
    "Signature",
    "SoftTimeLimitExceeded",
    "Task",
    "TaskFailure",
    "TaskRevokedError",
    "TimeLimitExceeded",
    "TimeoutError",
    "chain",
    "chord",
    "chunks",
    "group",
    "maybe_signature",
    "revoke",
    "shared_task",
    "signature",
    "subtask",
    "task",
    "xmap",
    "xstarmap",
]
