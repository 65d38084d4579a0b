"""``revoke(task_id)``: remove a task that has not started yet, as Celery's ``app.control.revoke``.

Runs in the caller's thread through ``jobsapp.api``: the job is found wherever it waits (its
queue, the schedule set, the retry set) and deleted by its raw bytes (atomic, so a worker that
fetched it first simply runs it), its features hear that it ended (``jobsapp.ending``: its unique
lock released, its batch counting it failed), and its result says REVOKED. A running task is not stopped
(``terminate`` is not supported and warns once); a finished one is left as it is.
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


def revoke(task_id: str | list[str], *, terminate: bool = False, **options: Any) -> int:
    """Delete the waiting jobs with these ids; returns how many were removed. A task that is
    running or done is not changed."""
    if terminate:
        warn_unsupported("revoke(terminate=True)", "a running task is not interrupted")
    removed = 0
    for each in [task_id] if isinstance(task_id, str) else list(task_id):
        location = api.find_job(each)
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
