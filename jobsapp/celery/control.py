"""``revoke(task_id)``: remove a task that has not started yet, as Celery's ``app.control.revoke``;
with ``terminate=True``, stop it while it runs too.

Runs in the caller's thread through ``jobsapp.api``: the job is found wherever it waits (its
queue, the schedule set, the retry set) and deleted by its raw bytes (atomic, so a worker that
fetched it first simply runs it), its features hear that it ended (``jobsapp.ending``: its unique
lock released, its batch counting it failed), and its result says REVOKED. A finished one is left
as it is. With ``terminate=True`` a task that is running, or that a worker fetched first, is
cancelled (``jobsapp.api.cancel``): its worker process interrupts it within a second
(``JobCancelled`` raised in its thread, or its coroutine cancelled; a blocking C call finishes
first) and it ends REVOKED, never retried. Celery sends ``signal`` (SIGTERM by default) to the pool
process; here a job is a thread, so every signal cancels the task the same way: a catchable
exception in the task, as SIGTERM's ``SystemExit`` in a Celery prefork child (SIGKILL cannot be
honoured more strongly: the process and its other jobs go on). A signal that does not end a task
in Celery (``SIGUSR1``: a soft time limit) warns once and cancels all the same.
"""

from __future__ import annotations

from typing import Any

from .. import api, result_writer, results
from ..ending import Fate
from .exceptions import TaskRevokedError
from .options import warn_unsupported

REVOKED_ERROR_CLASS = f"{TaskRevokedError.__module__}.{TaskRevokedError.__qualname__}"
DEFAULT_RETAIN_SECONDS = 24 * 3600


def mark_revoked(task_id: str, *, message: str = "revoked") -> None:
    """Record the task as revoked (REVOKED in ``AsyncResult.state``)."""
    record = results.get(task_id)
    retain = record.retain_seconds if record is not None and record.retain_seconds else DEFAULT_RETAIN_SECONDS
    result_writer.write_outcome(
        task_id,
        {"status": results.FAILED, "reason": "revoked", "error_class": REVOKED_ERROR_CLASS, "error_message": message},
        retain_seconds=retain,
    )


#: The signals that end a task in Celery (by name, with or without "SIG", or number).
TERMINATING_SIGNALS = frozenset({"TERM", "KILL", "INT", "QUIT", "15", "9", "2", "3"})


def _check_signal(signal: Any) -> None:
    if signal is None:
        return
    name = str(signal).upper().removeprefix("SIG")
    if name not in TERMINATING_SIGNALS:
        warn_unsupported(f"revoke(terminate=True, signal={signal!r})", "the task is cancelled as with SIGTERM")


def revoke(task_id: str | list[str], *, terminate: bool = False, signal: Any = None, **options: Any) -> int:
    """Delete the waiting jobs with these ids; with ``terminate``, cancel the running ones too
    (see the module header). Returns how many were removed or cancelled. A task that is done is
    not changed."""
    if terminate:
        _check_signal(signal)
    removed = 0
    for each in [task_id] if isinstance(task_id, str) else list(task_id):
        location = api.find_job(each)
        if terminate and (location is None or location.kind == "running"):
            # running, or taken by a worker before its heartbeat showed it: cancelled there
            # its end is recorded by the door (reason "cancelled": REVOKED), or it finished first
            if api.cancel(each).outcome in (api.CancelOutcome.CANCELLED, api.CancelOutcome.CANCELLING):
                removed += 1
            continue
        if location is None or location.kind in ("running", "dead"):
            continue
        # the delete tells the "job ended" door: its unique lock, batch, middleware...
        if location.kind == "queue":
            deleted = api.Queue(location.name).delete(location.record, fate=Fate.REVOKED)
        elif location.job_set is not None:
            deleted = location.job_set.delete(location.record, fate=Fate.REVOKED)  # type: ignore[arg-type]
        else:
            deleted = False
        if deleted:
            removed += 1
            mark_revoked(each)
    return removed
