"""The tracking layer's two engine middleware: the only place the engine calls into tracking.

``TrackingClientMiddleware`` runs in the pushing thread, once per job (push and push_bulk; never
for the scheduler's moves from ``schedule``/``retry``, so ``enqueue`` is recorded once per job).
For a job pushed by ``Task.objects.launch`` it only swaps in the jid recorded beforehand; for any
other tracked job it inserts the event (and a task of its own, or joins ``task_id``). Put it first
in ``CLIENT_MIDDLEWARE`` so it sees every job of a bulk push.

``TrackingServerMiddleware`` runs in processor threads around ``perform``: ``working`` before,
then ``finish``, ``failed`` (the job raised ``NoRetryError``/``BusinessFailure``), ``cancelled``
(``JobCancelled``; a job cancelled while it waited is heard through ``on_dead``) or ``error`` (any
other exception: the engine then calls ``on_retry``, back to ``enqueue`` with "waiting for retry
(n of m)", or ``on_dead``, a final ``error``). ``on_requeue`` records a job put back at shutdown.
Records go through the process's recording thread (``tracking.writer``): ``working`` is not
waited for, every later record is (``finish``, in a worker's processor thread, by the acker
before the job's ack rather than by the thread: ``jobsapp.hold_ack``), so a job is acknowledged
only once its final status is committed, and the records of one job are applied in the order
they happened.

Both return at once, without a query, for a job whose payload lacks ``use_task_event``. A
database error while recording is logged and the job goes on: tracking never decides a job's
fate. Both are shared by every thread and keep no per-job state on ``self``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError
from django.utils import timezone

from jobsapp import ClientMiddleware, DeadReason, JobCancelled, NoRetryError, ServerMiddleware
from jobsapp.client import Item

from . import recorder
from .launching import recorded_jid_for
from .progress import EventHandle
from .transitions import CANCEL, CRASHED, DEAD, FAILED_ON_PURPOSE, FINISHED, REQUEUED, RETRY_SCHEDULED, Change, Transition
from .writer import record_change, stop_writer

if TYPE_CHECKING:
    import redis

    from jobsapp import Job

logger = logging.getLogger("tracking.middleware")


#: on_dead reasons (``jobsapp.DeadReason``, every one), as the event's last message says them.
DEAD_REASONS: dict[str, str] = {
    DeadReason.RETRIES_EXHAUSTED: "retries exhausted",
    DeadReason.KILLED: "sent to the dead set by the job's retry policy",
    DeadReason.NO_RETRY: "failed, not retried",
    DeadReason.RETRY_DISABLED: "not retried (retry is disabled for this job)",
    DeadReason.UNKNOWN_CLASS: "not run: unknown job class",
    DeadReason.POISON: "not run again: it kept crashing its worker",
    DeadReason.MALFORMED: "not run: malformed payload",
    DeadReason.DISCARDED: "discarded by the job's retry policy",
    DeadReason.EXPIRED: "expired: not started before its expires_in ran out, never run",
    DeadReason.DELETED: "deleted by an operator before it ran",
    DeadReason.OPERATOR_KILLED: "sent to the dead set by an operator",
    DeadReason.CANCELLED: "cancelled",
    DeadReason.REVOKED: "revoked before it started",
}


def is_tracked(item: Any) -> bool:
    return isinstance(item, dict) and bool(item.get("use_task_event")) and isinstance(item.get("jid"), str)


def describe(exception: BaseException) -> str:
    text = str(exception)
    return f"{type(exception).__name__}: {text}" if text else type(exception).__name__


class TrackingClientMiddleware(ClientMiddleware):
    """Records ``enqueue`` for tracked jobs as they are pushed."""

    def wants(self, job_class: type[Job] | None, options: Item) -> bool:
        return bool(options.get("use_task_event"))

    def call(self, job_class: type[Job] | None, item: Item, queue: str, redis: redis.Redis) -> Item | None:
        if not is_tracked(item):
            return item
        recorded_jid = recorded_jid_for(item)
        if recorded_jid is not None:
            return {**item, "jid": recorded_jid}
        # A job of its own (perform_async / set(task_id=...)): recorded in the caller's
        # transaction, if any. An error here propagates: nothing has been pushed yet.
        task_id = recorder.record_enqueue(item)
        return {**item, "task_id": task_id}


class TrackingServerMiddleware(ServerMiddleware):
    """Records a tracked job's run and the engine's decisions about it."""

    def call(self, job: Job, item: Item, queue: str, call_next: Callable[[], Any]) -> Any:
        if not is_tracked(item):
            return call_next()
        handle = EventHandle(item["jid"], item=item)
        job.task_event = handle  # type: ignore[attr-defined]
        self._safely(handle, handle.start)
        try:
            result = call_next()
        except NoRetryError as exc:
            # A business failure: the engine fails the job without retry; the event is final.
            self._safely(handle, handle.end, FAILED_ON_PURPOSE, str(exc) or type(exc).__name__)
            raise
        except JobCancelled:
            # Cancelled: the engine ends it for good and tells on_dead (reason cancelled).
            self._safely(handle, handle.end, CANCEL, DEAD_REASONS[DeadReason.CANCELLED])
            raise
        except Exception as exc:
            # A crash: the engine retries or kills the job next and tells on_retry / on_dead.
            self._safely(handle, handle.end, CRASHED, describe(exc))
            raise
        # The engine acknowledges a job that returned: in a worker its ack waits for this commit
        # (jobsapp.hold_ack), not this thread.
        self._safely(handle, partial(handle.end, acknowledged=True), FINISHED, None)
        return result

    @staticmethod
    def _safely(handle: EventHandle, function: Callable[..., Any], *args: Any) -> None:
        try:
            function(*args)
        except DatabaseError:  # the job runs (or ends) as the engine decides; only the record is lost
            logger.exception("tracking: could not record job %s", handle.job_id)

    @staticmethod
    def _record(item: Item, transition: Transition, message: str) -> None:
        """Record one of the engine's decisions, after the job's earlier records."""
        record_change(Change(item["jid"], transition, timezone.now(), message=message), wait=True)

    def on_retry(
        self,
        job_class: type[Job] | None,
        item: Item,
        exception: BaseException,
        *,
        retry_count: int,
        retry_limit: int,
        run_at: float,
    ) -> None:
        if is_tracked(item):
            self._record(item, RETRY_SCHEDULED, f"waiting for retry ({retry_count + 1} of {retry_limit})")

    def on_dead(self, job_class: type[Job] | None, item: Item, exception: BaseException | None, *, reason: str) -> None:
        if not is_tracked(item):
            return
        if reason == DeadReason.NO_RETRY:
            # Recorded as failed by call() already (then this is a no-op); recorded here when
            # that write was lost.
            text = str(exception) if exception is not None else ""
            self._record(item, FAILED_ON_PURPOSE, text or DEAD_REASONS[reason])
            return
        if reason == DeadReason.CANCELLED:  # removed while it waited, or stopped while it ran
            self._record(item, CANCEL, DEAD_REASONS[reason])
            return
        message = DEAD_REASONS.get(reason, f"not run again: {reason}")
        if exception is not None and reason not in (DeadReason.RETRIES_EXHAUSTED, DeadReason.RETRY_DISABLED, DeadReason.NO_RETRY):
            message = f"{message} ({describe(exception)})"
        self._record(item, DEAD, message)

    def on_shutdown(self) -> None:
        """Flush and stop this process's recording thread before the worker exits."""
        stop_writer()

    def on_requeue(self, item: Item, *, reason: str) -> None:
        if is_tracked(item):
            self._record(item, REQUEUED, f"requeued unfinished ({reason})")
