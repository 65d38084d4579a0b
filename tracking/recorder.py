"""Recording the life of a tracked job: every event transition, idempotent under duplicates.

Called from the pushing thread (``enqueue``, through the client middleware and ``launching``), from
a worker process's recording thread (``tracking.writer``: batches of the processor threads'
transitions) and inline from any thread that records inside its own transaction (tests, the
admin). Touches the database only, never Redis.

One table says which transition may start from which ``(status, is_final)``; a transition that is
not allowed is a no-op that returns False. That is what makes recording idempotent: a job that
runs twice (at-least-once delivery) finds its event already ``working`` or already final, and a
late duplicate can never move a final event (``finish``, ``failed``, a dead ``error``) backwards.

``apply(changes)`` applies a batch of transitions (one, or a writer's few hundred) in one
transaction with a fixed number of statements, however many events it touches:

    SELECT id, job_id, task_id, status, is_final FROM event WHERE job_id IN (...)  [FOR UPDATE]
    SELECT messages ... (only for events that get messages)
    UPDATE event SET status, is_final, attempts, revision, updated_at, messages WHERE id = %s  (executemany)
    INSERT INTO taskcounter ... ON CONFLICT (task, shard) DO UPDATE SET x = x + excluded.x  (one row per task)
    UPDATE task ... (only when a task starts, reopens or may have finished)

The events are read under the writer's lock (SQLite: ``BEGIN IMMEDIATE``, the one writer;
PostgreSQL: ``FOR UPDATE`` in id order), so each transition is decided on the row it changes and
the counts move by exactly the events changed, in the same transaction: they always equal what
the events say. Locks are always taken events, then counter shards, then the task row (the
enqueue side takes the task row, then a new event, then shard 0, which only it uses), so writers
never deadlock.

A task is finished once its settled events reach its total. The check runs inside the
transaction that settled an event (exact on SQLite: one writer at a time) and, on PostgreSQL,
again after commit, because two processes settling the last two events concurrently each see
only their own: the one that commits last sees both after its commit. A check that finds the task
complete locks the task row and re-reads before writing ``finished_at`` (once: ``WHERE
finished_at IS NULL``), or, when the task has a follow-up job (``then_class``), adds that job to
the task and pushes it after commit. A duplicate run that finds its event already final checks
again, which covers a process that died between its commit and that check.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from .conf import tracking_settings
from .models import COUNT_FIELDS, TALLY_FIELDS, Event, EventStatus, Task, TaskCounter

logger = logging.getLogger("tracking.recorder")

Item = dict[str, Any]
#: {"at", "status", "message"}, plus "done" and "total" (ints) for report_progress entries.
MessageEntry = dict[str, Any]

ENQUEUE = EventStatus.ENQUEUE.value
WORKING = EventStatus.WORKING.value
FINISH = EventStatus.FINISH.value
FAILED = EventStatus.FAILED.value
ERROR = EventStatus.ERROR.value

#: The counter shard of the enqueue side (launch, a job joining a task, the follow-up job).
ENQUEUE_SHARD = 0

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
#: The most messages an event keeps: the first one (how it started) and the newest ones. A job
#: that reports progress every second for hours would otherwise make every flush rewrite, and
#: every poll download, megabytes.
MAX_MESSAGES = 200


def _capped(messages: list[MessageEntry]) -> list[MessageEntry]:
    return messages if len(messages) <= MAX_MESSAGES else [messages[0], *messages[-(MAX_MESSAGES - 1) :]]


#: Progress messages only: the status does not change.
MESSAGES_ONLY = Transition("messages", None, False, _ANY)


@dataclass(slots=True)
class Change:
    """One transition to apply to the event of ``job_id``, stamped when it happened.

    ``entries`` (already stamped, e.g. buffered progress lines) and then ``message`` (stamped
    ``at``, with the new status) are appended to the event's messages. ``item`` is the job's
    payload when the event may not exist yet (a job pushed without the client middleware, by
    Ruby or before tracking was installed): the event is then recorded before the transition.
    """

    job_id: str
    transition: Transition
    at: datetime
    message: str | None = None
    entries: Sequence[MessageEntry] = ()
    item: Item | None = None


@dataclass(slots=True)
class _EventState:
    id: int
    task_id: str
    status: str
    final: bool
    was: tuple[str, bool]
    changes: int = 0
    attempts: int = 0
    messages: list[MessageEntry] | None = None
    updated_at: datetime | None = None


@dataclass(slots=True)
class _TaskDelta:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TALLY_FIELDS, 0))
    started: bool = False
    reopened: bool = False


def message_entry(status: str, message: str, *, at: datetime | None = None) -> MessageEntry:
    return {"at": (at or timezone.now()).isoformat(), "status": status, "message": str(message)}


def thread_shard() -> int:
    """The counter shard of the calling thread (1..COUNTER_SHARDS-1): spread by process and thread."""
    shards = max(2, int(tracking_settings.COUNTER_SHARDS))
    return 1 + hash((os.getpid(), threading.get_ident())) % (shards - 1)


def record(
    job_id: str,
    transition: Transition,
    *,
    message: str | None = None,
    entries: Sequence[MessageEntry] = (),
    now: datetime | None = None,
    item: Item | None = None,
) -> bool:
    """Apply ``transition`` to the event of ``job_id`` now, in the caller's thread (and in its
    transaction, if any); True when the event changed.

    False when there is no such event or the transition is not allowed from its current state:
    nothing is written.
    """
    change = Change(job_id, transition, now or timezone.now(), message=message, entries=entries, item=item)
    return apply([change])[0]


def apply(changes: Sequence[Change], *, shard: int | None = None) -> list[bool]:
    """Apply ``changes`` in order, in one transaction (the caller's, if it has one); for each,
    True when it changed its event. Counts move in ``shard`` (default: the thread's)."""
    if not changes:
        return []
    # Inside the caller's transaction, check for finished tasks there too: its commit may come
    # much later (or, in a test, never).
    nested = connection.in_atomic_block
    with transaction.atomic():
        results, recheck = _apply(changes, thread_shard() if shard is None else shard, check_now=nested)
        if recheck:
            transaction.on_commit(lambda: settle_check(recheck), robust=True)
    return results


def _apply(changes: Sequence[Change], shard: int, *, check_now: bool) -> tuple[list[bool], set[str]]:
    job_ids = list(dict.fromkeys(change.job_id for change in changes))
    states = _read_states(job_ids)
    missing = [change.item for change in changes if change.job_id not in states and change.item is not None]
    if missing:
        for item in {str(item["jid"]): item for item in missing}.values():
            record_enqueue(item)
        states.update(_read_states([str(item["jid"]) for item in missing]))
    wanted = [change.job_id for change in changes if (change.message is not None or change.entries) and change.job_id in states]
    if wanted:
        for job_id, messages in Event.objects.filter(job_id__in=set(wanted)).values_list("job_id", "messages"):
            states[job_id].messages = list(messages or [])

    results: list[bool] = []
    final_seen: set[str] = set()
    for change in changes:
        state = states.get(change.job_id)
        transition = change.transition
        if state is None or (state.status, state.final) not in transition.allowed:
            if state is not None and state.final:
                final_seen.add(state.task_id)  # a late duplicate: see settle_check
            results.append(False)
            continue
        if transition.to_status is not None:
            state.status, state.final = transition.to_status, transition.to_final
        added = list(change.entries)
        if change.message is not None:
            added.append(message_entry(state.status, change.message, at=change.at))
        if added:
            state.messages = _capped([*(state.messages or []), *added])
        state.attempts += int(transition.counts_attempt)
        state.changes += 1
        state.updated_at = change.at
        results.append(True)

    changed = [state for state in states.values() if state.changes]
    now = max((change.at for change in changes), default=timezone.now())
    if changed:
        _write_events(changed)
        deltas = _count_deltas(changed)
        _add_counts(deltas, shard, now)
        _touch_tasks(deltas, now)
        settling = {task_id for task_id, delta in deltas.items() if delta.counts["settled"] > 0}
    else:
        settling = set()
    to_check = settling | final_seen
    if not to_check:
        return results, set()
    if not connection.features.has_select_for_update:
        # SQLite: this transaction is the one writer, so what it sees is everything.
        _settle(to_check, now)
        return results, set()
    # Elsewhere a concurrent transaction may settle the rest of a task and commit first, unseen
    # from here: check after commit, when the last of them to commit sees them all.
    return results, _settle(to_check, now) if check_now else to_check


def _read_states(job_ids: Sequence[str]) -> dict[str, _EventState]:
    """The events of ``job_ids``, locked for this transaction where the database locks rows."""
    if not job_ids:
        return {}
    table = connection.ops.quote_name(Event._meta.db_table)
    placeholders = ", ".join(["%s"] * len(job_ids))
    # Identifiers from model metadata only; every value is a parameter.
    sql = f"SELECT id, job_id, task_id, status, is_final FROM {table} WHERE job_id IN ({placeholders})"  # noqa: S608
    if connection.features.has_select_for_update:
        sql += " ORDER BY id FOR UPDATE"
    with connection.cursor() as cursor:
        cursor.execute(sql, list(job_ids))
        rows = cursor.fetchall()
    return {
        job_id: _EventState(event_id, task_id, status, bool(final), (status, bool(final)))
        for event_id, job_id, task_id, status, final in rows
    }


def _write_events(changed: Sequence[_EventState]) -> None:
    """One UPDATE per event on SQLite (in-process calls), one statement for all on PostgreSQL."""
    table = connection.ops.quote_name(Event._meta.db_table)
    adapt = connection.ops.adapt_datetimefield_value
    rows = [
        (
            state.id,
            state.status,
            state.final,
            state.attempts,
            state.changes,
            adapt(state.updated_at),
            None if state.messages is None else json.dumps(state.messages),
        )
        for state in changed
    ]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            values = ", ".join(["(%s::bigint, %s::text, %s::boolean, %s::int, %s::int, %s::timestamptz, %s::jsonb)"] * len(rows))
            cursor.execute(
                f"UPDATE {table} AS e SET status = v.status, is_final = v.final, attempts = e.attempts + v.attempts, "  # noqa: S608
                "revision = e.revision + v.changes, updated_at = v.updated_at, messages = COALESCE(v.messages, e.messages) "
                f"FROM (VALUES {values}) AS v (id, status, final, attempts, changes, updated_at, messages) WHERE e.id = v.id",
                [value for row in rows for value in row],
            )
        else:
            cursor.executemany(
                f"UPDATE {table} SET status = %s, is_final = %s, attempts = attempts + %s, revision = revision + %s, "  # noqa: S608
                "updated_at = %s, messages = COALESCE(%s, messages) WHERE id = %s",
                [(*row[1:], row[0]) for row in rows],
            )


def _count_deltas(changed: Sequence[_EventState]) -> dict[str, _TaskDelta]:
    deltas: dict[str, _TaskDelta] = {}
    for state in changed:
        delta = deltas.setdefault(state.task_id, _TaskDelta())
        counts = delta.counts
        (old_status, old_final) = state.was
        if old_status != state.status:
            counts[COUNT_FIELDS[old_status]] -= 1
            counts[COUNT_FIELDS[state.status]] += 1
        counts["settled"] += int(state.final) - int(old_final)
        counts["changes"] += state.changes
        delta.started = delta.started or state.attempts > 0
        delta.reopened = delta.reopened or (old_final and not state.final)
    return deltas


def add_counts(task_id: str, shard: int, now: datetime, **counts: int) -> None:
    """Add ``counts`` (TaskCounter columns) to the task's ``shard`` row, creating it if needed."""
    delta = _TaskDelta()
    delta.counts.update(counts)
    _add_counts({task_id: delta}, shard, now)


def _add_counts(deltas: dict[str, _TaskDelta], shard: int, now: datetime) -> None:
    table = connection.ops.quote_name(TaskCounter._meta.db_table)
    columns = [connection.ops.quote_name(name) for name in TALLY_FIELDS]
    stamp = connection.ops.adapt_datetimefield_value(now)
    rows = [(task_id, shard, *(delta.counts[name] for name in TALLY_FIELDS), stamp) for task_id, delta in sorted(deltas.items())]
    row_placeholders = f"({', '.join(['%s'] * len(rows[0]))})"
    sql = (
        f"INSERT INTO {table} (task_id, shard, {', '.join(columns)}, updated_at) "  # noqa: S608
        f"VALUES {', '.join([row_placeholders] * len(rows))} "
        f"ON CONFLICT (task_id, shard) DO UPDATE SET "
        + ", ".join(f"{column} = {table}.{column} + excluded.{column}" for column in columns)
        + ", updated_at = excluded.updated_at"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for row in rows for value in row])


#: Tasks this process has seen started (their started_at is set): not written again.
_started: set[str] = set()


def _touch_tasks(deltas: dict[str, _TaskDelta], now: datetime) -> None:
    """The task-row side of a batch: started_at once per task, finished_at cleared on a reopen."""
    starting = [task_id for task_id, delta in deltas.items() if delta.started and task_id not in _started]
    if starting:
        Task.objects.filter(pk__in=starting, started_at__isnull=True).update(started_at=now)
        if len(_started) > 10_000:
            _started.clear()
        transaction.on_commit(lambda: _started.update(starting))
    reopened = [task_id for task_id, delta in deltas.items() if delta.reopened]
    if reopened:
        Task.objects.filter(pk__in=reopened).update(finished_at=None, revision=F("revision") + 1, updated_at=now)


def _settled_sum() -> Subquery:
    return Subquery(TaskCounter.objects.filter(task_id=OuterRef("pk")).values("task_id").annotate(total=Sum("settled")).values("total"))


def _progress(task_ids: Sequence[str]) -> list[tuple[str, int, int, str, bool, bool]]:
    """(id, total, settled, then_class, then_queued, has_callbacks) of the unfinished tasks among
    ``task_ids`` (``has_callbacks``: an ``on_complete`` or ``on_success`` class is set, so a task
    without one finishes without reading them)."""
    tasks = connection.ops.quote_name(Task._meta.db_table)
    counters = connection.ops.quote_name(TaskCounter._meta.db_table)
    placeholders = ", ".join(["%s"] * len(task_ids))
    sql = (
        f"SELECT t.id, t.total, (SELECT COALESCE(SUM(c.settled), 0) FROM {counters} c WHERE c.task_id = t.id), "  # noqa: S608
        f"t.then_class, t.then_queued, CASE WHEN t.on_complete_class <> '' OR t.on_success_class <> '' THEN 1 ELSE 0 END "
        f"FROM {tasks} t WHERE t.id IN ({placeholders}) AND t.finished_at IS NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, list(task_ids))
        return [
            (task_id, int(total), int(settled), then_class, bool(queued), bool(callbacks))
            for task_id, total, settled, then_class, queued, callbacks in cursor.fetchall()
        ]


def _settle(task_ids: Iterable[str], now: datetime) -> set[str]:
    """Finish (or add the follow-up job to) each of ``task_ids`` whose events have all settled, in
    the caller's transaction; returns the ones still unfinished."""
    unfinished: set[str] = set()
    for task_id, total, settled, then_class, then_queued, has_callbacks in _progress(sorted(task_ids)):
        if settled < total:
            unfinished.add(task_id)
            continue
        if connection.features.has_select_for_update:
            # Complete as far as this transaction sees: lock the row, then look again (a new
            # statement sees whatever committed meanwhile: a job joining, a reopen). SQLite has
            # nothing to lock: this transaction is its one writer.
            list(Task.objects.select_for_update().filter(pk=task_id).values_list("pk"))
            again = _progress([task_id])
            if not again or again[0][2] < again[0][1]:
                unfinished.update(row[0] for row in again)
                continue
            _, total, settled, then_class, then_queued, has_callbacks = again[0]
        if then_class and not then_queued:
            queue_follow_up(task_id, now=now)
        elif (
            Task.objects.filter(pk=task_id, finished_at__isnull=True).update(finished_at=now, revision=F("revision") + 1, updated_at=now)
            and has_callbacks
        ):
            from .launching import fire_callbacks

            fire_callbacks(task_id)  # on_complete / on_success, at most once each (tracking.launching)
    return unfinished


def settle_check(task_ids: Iterable[str], *, now: datetime | None = None) -> None:
    """Finish the tasks among ``task_ids`` whose events have all settled (own transaction, only
    when one looks complete)."""
    complete = [row[0] for row in _progress(sorted(task_ids)) if row[2] >= row[1]]
    if complete:
        with transaction.atomic():
            _settle(complete, now or timezone.now())


def queue_follow_up(task_id: str, *, now: datetime | None = None) -> str | None:
    """Once every event of the task has settled, add its ``then_class`` job and push it after commit.

    A conditional UPDATE (``then_queued = false``) makes this happen once per task, however many
    last events race. Returns the new jid, or None when it is not time yet (or already done).
    """
    from jobsapp.payload import new_jid

    from .launching import push_recorded

    timestamp = now or timezone.now()
    due = list(
        Task.objects.filter(pk=task_id, then_queued=False)
        .exclude(then_class="")
        .annotate(settled=Coalesce(_settled_sum(), 0))
        .filter(settled__gte=F("total"))
        .values_list("pk", flat=True)
    )
    # The claim: of racing callers, the one whose UPDATE still finds then_queued false wins.
    if not due or not Task.objects.filter(pk=task_id, then_queued=False).update(
        then_queued=True, total=F("total") + 1, revision=F("revision") + 1, updated_at=timestamp
    ):
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
    add_counts(task_id, ENQUEUE_SHARD, timestamp, enqueue=1, changes=1)
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
    task_id: Any = item.get("task_id")
    params: dict[str, Any] = {"args": list(item.get("args") or [])}
    if item.get("kwargs"):
        params["kwargs"] = item["kwargs"]
    try:
        with transaction.atomic():
            joined = isinstance(task_id, str) and Task.objects.filter(pk=task_id).update(
                total=F("total") + 1,
                revision=F("revision") + 1,
                updated_at=timestamp,
                finished_at=None,
            )
            if not joined:
                task_id = Task.objects.create(
                    name=str(item.get("class", "")),
                    total=1,
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
            add_counts(str(task_id), ENQUEUE_SHARD, timestamp, enqueue=1, changes=1)
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
    now = timezone.now()
    return sum(apply([Change(job_id, DEAD, now, message=reason) for job_id in job_ids]))
