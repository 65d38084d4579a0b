"""Recording the life of a tracked job: every event transition, idempotent under duplicates.

Called from the pushing thread (``enqueue``, through the client middleware and ``launching``) and
from worker processor threads (everything else, through the server middleware and its hooks).
Touches the database only, never Redis.

One table says which transition may start from which ``(status, is_final)``; a transition that is
not allowed is a no-op that returns False. That is what makes recording idempotent: a job that
runs twice (at-least-once delivery) finds its event already ``working`` or already final, and a
late duplicate can never move a final event (``finish``, ``failed``, a dead ``error``) backwards.

Each transition is a compare-and-swap inside one transaction:

    SELECT status, is_final, messages, revision FROM event WHERE job_id = %s
    UPDATE event SET ... , revision = revision + 1 WHERE id = %s AND revision = %s
    UPDATE task  SET <old>_count = <old>_count - 1, <new>_count = <new>_count + 1, ...

The task counts move only when the event UPDATE changed a row, so they always equal the events'
statuses. On SQLite the transaction is ``BEGIN IMMEDIATE`` (settings), so the swap cannot miss; on
PostgreSQL two racing copies serialize on the event row and the loser re-reads and re-decides.
Rows are always locked event first, then task, so transitions never deadlock.

When the last event of a task settles, the same ``UPDATE task`` sets ``finished_at`` (only once:
``WHERE finished_at IS NULL``), or, when the task has a follow-up job (``then_class``), adds that
job to the task and pushes it after commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models import Case, F, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from .models import COUNT_FIELDS, Event, EventStatus, Task

logger = logging.getLogger("tracking.recorder")

Item = dict[str, Any]
MessageEntry = dict[str, str]

ENQUEUE = EventStatus.ENQUEUE.value
WORKING = EventStatus.WORKING.value
FINISH = EventStatus.FINISH.value
FAILED = EventStatus.FAILED.value
ERROR = EventStatus.ERROR.value

#: A compare-and-swap that lost this many races in a row gives up (logged); it never happens
#: unless many copies of one job run at once.
SWAP_ATTEMPTS = 8

_NOT_FINAL = frozenset((status, False) for status in (ENQUEUE, WORKING, ERROR))
_ANY = frozenset((status.value, final) for status in EventStatus for final in (False, True))


@dataclass(frozen=True)
class Transition:
    """A change an event may go through: to ``to_status`` (None keeps the status) from ``allowed``."""

    name: str
    to_status: str | None
    to_final: bool
    allowed: frozenset[tuple[str, bool]]
    counts_attempt: bool = False


#: The job started running (again, after a retry or a requeue; or a duplicate copy started).
START = Transition("start", WORKING, False, _NOT_FINAL, counts_attempt=True)
#: perform returned.
FINISHED = Transition("finish", FINISH, True, _NOT_FINAL)
#: perform raised the business failure (NoRetryError): final, never retried.
FAILED_ON_PURPOSE = Transition("failed", FAILED, True, _NOT_FINAL)
#: perform crashed; the engine decides next whether it retries (RETRY_SCHEDULED) or not (DEAD).
CRASHED = Transition("error", ERROR, False, _NOT_FINAL)
#: The engine scheduled a retry: back to enqueue, "waiting for retry (n of m)".
RETRY_SCHEDULED = Transition("retry", ENQUEUE, False, _NOT_FINAL)
#: The engine will not run the job again (retries exhausted, dead, unknown class...).
DEAD = Transition("dead", ERROR, True, _NOT_FINAL)
#: Put back unfinished at worker shutdown.
REQUEUED = Transition("requeue", ENQUEUE, False, frozenset({(WORKING, False)}))
#: An operator retries a dead job (admin action): the only way out of a final state.
REOPENED = Transition("reopen", ENQUEUE, False, frozenset({(ERROR, True)}))
#: Progress messages only: the status does not change.
MESSAGES_ONLY = Transition("messages", None, False, _ANY)


def message_entry(status: str, message: str, *, at: datetime | None = None) -> MessageEntry:
    return {"at": (at or timezone.now()).isoformat(), "status": status, "message": str(message)}


def record(
    job_id: str,
    transition: Transition,
    *,
    message: str | None = None,
    entries: Sequence[MessageEntry] = (),
    now: datetime | None = None,
) -> bool:
    """Apply ``transition`` to the event of ``job_id``; True when the event changed.

    ``entries`` (already stamped, e.g. buffered progress lines) and then ``message`` (stamped now,
    with the new status) are appended to the event's messages in the same write. False when there
    is no such event or the transition is not allowed from its current state: nothing is written.
    """
    timestamp = now or timezone.now()
    for _attempt in range(SWAP_ATTEMPTS):
        with transaction.atomic():
            row = (
                Event.objects.filter(job_id=job_id)
                .values_list(
                    "id",
                    "task_id",
                    "status",
                    "is_final",
                    "messages",
                    "revision",
                    "task__then_class",
                    "task__then_queued",
                )
                .first()
            )
            if row is None:
                return False
            event_id, task_id, status, is_final, messages, revision, then_class, then_queued = row
            if (status, is_final) not in transition.allowed:
                return False
            new_status = transition.to_status or status
            new_final = transition.to_final if transition.to_status else is_final
            added = list(entries)
            if message is not None:
                added.append(message_entry(new_status, message, at=timestamp))
            changes: dict[str, Any] = {"revision": F("revision") + 1, "updated_at": timestamp}
            if added:
                changes["messages"] = [*(messages or []), *added]
            if transition.to_status:
                changes["status"] = new_status
                changes["is_final"] = new_final
            if transition.counts_attempt:
                changes["attempts"] = F("attempts") + 1
            if not Event.objects.filter(id=event_id, revision=revision).update(**changes):
                continue  # another copy of the job changed the event first: re-read and re-decide
            _move_counts(
                task_id,
                (status, is_final),
                (new_status, new_final),
                timestamp,
                follow_up_pending=bool(then_class) and not then_queued,
            )
            return True
    logger.warning("event %s: gave up %s after %d lost races", job_id, transition.name, SWAP_ATTEMPTS)
    return False


def _move_counts(
    task_id: str,
    old: tuple[str, bool],
    new: tuple[str, bool],
    timestamp: datetime,
    *,
    follow_up_pending: bool,
) -> None:
    """Move the task's counts by one event going from ``old`` to ``new`` (in the caller's transaction)."""
    (old_status, old_final), (new_status, new_final) = old, new
    if old == new:
        return
    changes: dict[str, Any] = {"revision": F("revision") + 1, "updated_at": timestamp}
    if old_status != new_status:
        changes[COUNT_FIELDS[old_status]] = F(COUNT_FIELDS[old_status]) - 1
        changes[COUNT_FIELDS[new_status]] = F(COUNT_FIELDS[new_status]) + 1
    if new_status == WORKING:
        changes["started_at"] = Coalesce(F("started_at"), Value(timestamp, output_field=models.DateTimeField()))
    settled_delta = int(new_final) - int(old_final)
    if settled_delta:
        changes["settled_count"] = F("settled_count") + settled_delta
    if settled_delta > 0 and not follow_up_pending:
        # The SET expressions see the row before this UPDATE: settled_count + 1 >= total means
        # this event was the last one, and exactly one transaction can see that.
        changes["finished_at"] = Case(
            When(
                finished_at__isnull=True,
                settled_count__gte=F("total") - settled_delta,
                then=Value(timestamp, output_field=models.DateTimeField()),
            ),
            default=F("finished_at"),
        )
    elif settled_delta < 0:
        changes["finished_at"] = None
    Task.objects.filter(pk=task_id).update(**changes)
    if settled_delta > 0 and follow_up_pending:
        queue_follow_up(task_id, now=timestamp)


def queue_follow_up(task_id: str, *, now: datetime | None = None) -> str | None:
    """Once every event of the task has settled, add its ``then_class`` job and push it after commit.

    A conditional UPDATE (``then_queued = false``) makes this happen once per task, however many
    last events race. Returns the new jid, or None when it is not time yet (or already done).
    """
    from jobsapp.payload import new_jid

    from .launching import push_recorded

    timestamp = now or timezone.now()
    claimed = (
        Task.objects.filter(pk=task_id, then_queued=False, settled_count__gte=F("total"))
        .exclude(then_class="")
        .update(
            then_queued=True,
            total=F("total") + 1,
            enqueue_count=F("enqueue_count") + 1,
            revision=F("revision") + 1,
            updated_at=timestamp,
        )
    )
    if not claimed:
        return None
    then_class, then_args = Task.objects.values_list("then_class", "then_args").get(pk=task_id)
    job_id = new_jid()
    Event.objects.create(
        job_id=job_id,
        task_id=task_id,
        job_class=then_class,
        queue=_queue_of(then_class),
        params={"args": list(then_args or [])},
        created_at=timestamp,
        updated_at=timestamp,
    )
    transaction.on_commit(lambda: push_recorded(task_id, then_class, [(job_id, list(then_args or []), None)]))
    return job_id


def _queue_of(wire_name: str) -> str:
    from jobsapp import registry

    if registry.is_registered(wire_name):
        return str(registry.lookup(wire_name).get_sidekiq_options().get("queue") or "default")
    return "default"


def record_enqueue(item: Item, *, now: datetime | None = None) -> str:
    """Insert the event of a tracked job pushed one at a time; returns its task id.

    The job joins ``item["task_id"]`` when that task exists (its total grows by one and it is no
    longer finished); otherwise it gets a task of its own. If the event exists already (the same
    jid pushed again), nothing changes: the job is recorded once.
    """
    timestamp = now or timezone.now()
    job_id = item["jid"]
    task_id = item.get("task_id")
    params: dict[str, Any] = {"args": list(item.get("args") or [])}
    if item.get("kwargs"):
        params["kwargs"] = item["kwargs"]
    try:
        with transaction.atomic():
            joined = isinstance(task_id, str) and Task.objects.filter(pk=task_id).update(
                total=F("total") + 1,
                enqueue_count=F("enqueue_count") + 1,
                revision=F("revision") + 1,
                updated_at=timestamp,
                finished_at=None,
            )
            if not joined:
                task_id = Task.objects.create(
                    name=str(item.get("class", "")),
                    total=1,
                    enqueue_count=1,
                    created_at=timestamp,
                    updated_at=timestamp,
                ).pk
            Event.objects.create(
                job_id=job_id,
                task_id=task_id,
                job_class=str(item.get("class", "")),
                queue=str(item.get("queue") or "default"),
                params=params,
                created_at=timestamp,
                updated_at=timestamp,
            )
    except IntegrityError:
        # The event exists (this jid was recorded before, or by a concurrent writer that just
        # committed): the block above was rolled back, so nothing was counted twice.
        existing = Event.objects.filter(job_id=job_id).values_list("task_id", flat=True).first()
        if existing is None:
            raise
        return str(existing)
    return str(task_id)


def settle_unpushed(job_ids: Iterable[str], reason: str) -> int:
    """Mark recorded events whose job never reached Redis as dead errors; returns how many."""
    changed = 0
    for job_id in job_ids:
        changed += record(job_id, DEAD, message=reason)
    return changed
