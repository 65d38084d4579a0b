"""Recording tracked jobs in the database: the SQL of events, their counts and the task row.
Touches the database only, never Redis, and never decides what a task does next: that is
``tracking.launching`` (the task's lifecycle), which calls this module inside its transactions.

Which transition may start from which state is ``tracking.transitions`` (pure); this module
applies a batch of them (one, or a writer's few hundred) with a fixed number of statements,
however many events it touches. On PostgreSQL outside a transaction (the recording thread's
batches), ``write_committed``: its own transaction in two round trips (psycopg's pipeline mode),
each statement's text fixed (so psycopg can prepare it, where the connection's ``prepare_threshold``
allows), its values in one JSON document. Batches of runs and the engine's decisions take one round
trip instead (``tracking.single_trip``); this path takes the others (progress messages, requeues,
reopens):

    BEGIN; SELECT id, job_id, task_id, status, is_final, messages (only of events that get messages)
        FROM event WHERE job_id = ANY(...) ORDER BY id FOR UPDATE
    UPDATE event ... FROM json_to_recordset(...);
    INSERT INTO taskcounter ... SELECT ... FROM json_to_recordset(...)
        ON CONFLICT (task, shard) DO UPDATE SET x = x + excluded.x;
        (an UPDATE of the task row only when a task starts, once per process, or reopens);
        COMMIT; SELECT the progress of the unfinished tasks it settled events of

Inside a caller's transaction (``write``), two statements: the same read, then the event UPDATE
and the counter upsert in one statement that also returns each task's settled events as that
transaction sees them. SQLite (one writer, in-process calls) runs the UPDATE per event, the upsert
and the progress read one by one.

The events are read under the writer's lock (SQLite: ``BEGIN IMMEDIATE``, the one writer;
PostgreSQL: ``FOR UPDATE`` in id order), so each transition is decided on the row it changes and
the counts move by exactly the events changed, in the same transaction: they always equal what
the events say. The progress read says which tasks are complete (every event settled), to be
finished after their row is locked and read again (``tracking.launching``). ``write_committed``
reads it after its commit, in a new snapshot, so of writers settling a task's last events
concurrently the one that commits last sees them all. ``write`` reads it inside the transaction
(its own shard as just updated, the others' as committed): exact on SQLite's one writer; on
PostgreSQL a task it leaves incomplete may have been completed by a concurrent writer unseen,
so those are checked again after commit.

Locks are always taken events (in id order), then the writer's own counter shard, then task rows
(the enqueue side takes the task row, then a new event, then shard 0, which no recording writer
takes), so writers do not wait on each other's counter rows and the busy path cannot deadlock. Only
the rare task-row writes of two batches (a task's first start in this process, a reopen, a
finish) could meet in opposite orders; PostgreSQL detects that and rolls one back, and the writer
retries it (``tracking.writer``).

Also here: the enqueue side's rows (``record_enqueue`` for a job pushed one at a time,
``add_events`` for jobs added to a task, ``claim_follow_up``) and the reads and writes of the
finish check (``progress``, ``lock_task``, ``mark_finished``), which ``tracking.launching`` runs.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from jobsapp.client import Item, job_template

from .conf import tracking_settings
from .errors import TaskCancelled
from .models import COUNT_FIELDS, TALLY_FIELDS, Event, Task, TaskCounter
from .transitions import Change, capped, message_entry

logger = logging.getLogger("tracking.recorder")

#: The counter shard of the enqueue side (launch, a job joining a task, the follow-up job).
ENQUEUE_SHARD = 0

#: (jid, args, kwargs or None) of one job to record (and push).
RecordedJob = tuple[str, list[Any], dict[str, Any] | None]


@dataclass(slots=True)
class _EventState:
    id: int
    task_id: str
    status: str
    final: bool
    was: tuple[str, bool]
    changes: int = 0
    attempts: int = 0
    messages: list[dict[str, Any]] | None = None
    updated_at: datetime | None = None

    def written(self) -> dict[str, Any]:
        """The fields a batch writes back to the event row (JSON-ready; ``updated_at`` is set by
        the transitions before any write)."""
        return {
            "status": self.status,
            "final": self.final,
            "attempts": self.attempts,
            "changes": self.changes,
            "updated_at": self.updated_at.isoformat(),  # type: ignore[union-attr]
            "messages": self.messages,
        }


@dataclass(slots=True)
class _TaskDelta:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TALLY_FIELDS, 0))
    started: bool = False
    reopened: bool = False


@dataclass(slots=True)
class Written:
    """What ``write`` did: for each change, whether it changed its event; the tasks it settled
    events of and found complete, as this transaction sees them (every event settled, still
    unfinished; not locked); those it left incomplete but cannot be sure of (PostgreSQL: see
    ``tracking.launching``: checked again after commit); the tasks of late duplicates (an event
    already final: a finish check may have been lost); the batch's time."""

    results: list[bool]
    complete: list[TaskProgress]
    unsure: set[str]
    duplicates_of: set[str]
    now: datetime


_thread_numbers = itertools.count()
_this_thread = threading.local()


def thread_shard() -> int:
    """The counter shard of the calling thread (1..COUNTER_SHARDS-1): threads take them in turn
    (by their order of first use, not by their ident, which a new thread may reuse)."""
    shards = max(2, int(tracking_settings.COUNTER_SHARDS))
    number = getattr(_this_thread, "number", None)
    if number is None:
        number = _this_thread.number = next(_thread_numbers)
    return 1 + (os.getpid() + number) % (shards - 1)


def write(changes: Sequence[Change], shard: int) -> Written:
    """Apply ``changes`` in order to their events, add the counts to ``shard`` and the settled
    events to their tasks, in the caller's transaction (``tracking.launching.apply`` opens it and
    finishes the tasks this finds complete)."""
    job_ids = list(dict.fromkeys(change.job_id for change in changes))
    wanted = {change.job_id for change in changes if change.message is not None or change.entries}
    states = _read_states(job_ids, wanted)
    missing = [change.item for change in changes if change.job_id not in states and change.item is not None]
    if missing:
        for item in {str(item["jid"]): item for item in missing}.values():
            record_enqueue(item)
        states.update(_read_states([str(item["jid"]) for item in missing], wanted))

    results, final_seen = _transition(changes, states)
    changed = [state for state in states.values() if state.changes]
    now = max((change.at for change in changes), default=timezone.now())
    if not changed:
        return Written(results, [], set(), final_seen, now)
    deltas = _count_deltas(changed)
    if connection.vendor == "postgresql":
        seen = _write_postgresql(changed, deltas, shard, now)
    else:
        seen = _write_one_by_one(changed, deltas, shard, now)
    _touch_tasks(deltas, now)
    settling = {task_id for task_id, delta in deltas.items() if delta.counts["settled"] > 0}
    complete = [task for task in seen if task.complete and task.task_id in settling | final_seen]
    done = {task.task_id for task in complete}
    # Only SQLite's one writer sees everything; elsewhere a task this batch leaves incomplete may
    # be completed by a concurrent writer's commit that it cannot see yet.
    unsure = set() if connection.vendor != "postgresql" else settling - done
    return Written(results, complete, unsure, final_seen - done, now)


def can_write_committed() -> bool:
    """Whether ``write_committed`` can run here: PostgreSQL through psycopg 3, outside any
    transaction (the recording thread's batches)."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return False
    # imported here: a project on SQLite or MySQL need not have psycopg, and a worker that does
    # not use it should not carry it (~9 MB per process)
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return is_psycopg3


def write_committed(changes: Sequence[Change], shard: int) -> Committed | None:
    """PostgreSQL: apply ``changes`` as ``write`` does, in a transaction of its own, committed
    before this returns, in two round trips (psycopg's pipeline mode):

    1. ``BEGIN`` and the events, read and locked (``FOR UPDATE``, in id order);
    2. one UPDATE of the changed events, the counter shard's upsert, the task rows' rare
       updates (``started_at`` once per task and process; a reopen), ``COMMIT``, and then, in a
       new snapshot, the progress of the unfinished tasks this batch settled events of (or found
       late duplicates of).

    That last read runs after the commit, so of writers settling a task's last events
    concurrently the one that commits last sees them all (see ``tracking.launching``). Every
    statement's text is fixed, so psycopg can prepare it (Django turns that off unless
    ``OPTIONS["prepare_threshold"]`` is set); its values travel as
    one JSON document (``json.dumps`` builds it in C; psycopg adapts an array per column element
    by element in Python); they skip Django's cursor wrappers.

    Returns None, with nothing written, when a change's event is missing and the change carries
    the job's payload (recording its enqueue first is ``write``'s slower path).
    """
    job_ids = list(dict.fromkeys(change.job_id for change in changes))
    wanted = [change.job_id for change in changes if change.message is not None or change.entries]
    import psycopg  # PostgreSQL only: see can_write_committed

    sql = _committed_sql()
    connection.ensure_connection()
    raw = connection.connection
    with connection.wrap_database_errors:
        # Server-side binding, whatever cursor_factory Django set: one cursor for the statements
        # whose results are not read, one per read.
        cursor, read, check = psycopg.Cursor(raw), psycopg.Cursor(raw), psycopg.Cursor(raw)
        with raw.pipeline() as pipeline:
            cursor.execute("BEGIN")
            read.execute(sql.read, [json.dumps(wanted), json.dumps(job_ids)])
            pipeline.sync()
            states: dict[str, _EventState] = {}
            wanted_set = set(wanted)
            for event_id, job_id, task_id, status, final, messages in read.fetchall():
                state = states[job_id] = _EventState(event_id, task_id, status, final, (status, final))
                if job_id in wanted_set:
                    # Django's psycopg loader hands jsonb over as text (its fields parse it)
                    state.messages = list((json.loads(messages) if isinstance(messages, str) else messages) or [])
            if any(change.job_id not in states and change.item is not None for change in changes):
                cursor.execute("ROLLBACK")
                return None
            results, final_seen = _transition(changes, states)
            changed = [state for state in states.values() if state.changes]
            now = max(change.at for change in changes)
            deltas = _count_deltas(changed)
            starting = [task_id for task_id, delta in deltas.items() if delta.started and task_id not in _started]
            if changed:
                # One JSON document per statement: json.dumps is C, an array per column is not.
                rows = [{"id": state.id, **state.written()} for state in changed]
                cursor.execute(sql.events, [json.dumps(rows), [state.id for state in changed]])
                counters = [{"task_id": task_id, **deltas[task_id].counts} for task_id in sorted(deltas)]
                cursor.execute(sql.counters, [shard, now, json.dumps(counters)])
                if starting:
                    cursor.execute(sql.started, [now, starting])
                reopened = [task_id for task_id, delta in deltas.items() if delta.reopened]
                if reopened:
                    cursor.execute(sql.reopened, [now, reopened])
            cursor.execute("COMMIT")
            checked = sorted({task_id for task_id, delta in deltas.items() if delta.counts["settled"] > 0} | final_seen)
            if checked:
                check.execute(sql.progress, [checked])
            pipeline.sync()
            seen = [TaskProgress.from_row(row) for row in check.fetchall()] if checked else []
    if starting:
        if len(_started) > 10_000:
            _started.clear()
        _started.update(starting)
    return Committed(results, [task for task in seen if task.complete], now)


@dataclass(frozen=True, slots=True)
class Committed:
    """What ``write_committed`` did: for each change whether it changed its event; the tasks
    complete after its commit (every event settled, still unfinished: not locked, to finish in
    a transaction that locks and reads them again); the batch's time."""

    results: list[bool]
    complete: list[TaskProgress]
    now: datetime


@dataclass(frozen=True, slots=True)
class _CommittedSql:
    read: str
    events: str
    counters: str
    started: str
    reopened: str
    progress: str


@functools.cache
def _committed_sql() -> _CommittedSql:
    """``write_committed``'s statements (identifiers from model metadata only; every value is a
    parameter)."""
    quote = connection.ops.quote_name
    events, tasks, counters = (quote(model._meta.db_table) for model in (Event, Task, TaskCounter))
    columns = [quote(name) for name in TALLY_FIELDS]
    return _CommittedSql(
        read=(
            "SELECT id, job_id, task_id, status, is_final, "  # noqa: S608
            "CASE WHEN job_id = ANY(ARRAY(SELECT json_array_elements_text(%s::json))) THEN messages END "
            f"FROM {events} WHERE job_id = ANY(ARRAY(SELECT json_array_elements_text(%s::json))) ORDER BY id FOR UPDATE"
        ),
        events=(
            f"UPDATE {events} AS e SET status = v.status, is_final = v.final, attempts = e.attempts + v.attempts, "  # noqa: S608
            "revision = e.revision + v.changes, updated_at = v.updated_at, messages = COALESCE(v.messages, e.messages) "
            "FROM json_to_recordset(%s::json) "
            "AS v (id bigint, status text, final boolean, attempts int, changes int, updated_at timestamptz, messages jsonb) "
            # The ids again as an array: the planner cannot tell how many rows a JSON document holds
            # (it guesses 100), and with a freshly grown table's stale statistics it then scanned
            # the whole event table to join them; an array it reads and looks each id up.
            "WHERE e.id = v.id AND e.id = ANY(%s::bigint[])"
        ),
        counters=(
            f"INSERT INTO {counters} (task_id, shard, {', '.join(columns)}, updated_at) "  # noqa: S608
            f"SELECT v.task_id, %s::int, {', '.join(f'v.{column}' for column in columns)}, %s::timestamptz "
            f"FROM json_to_recordset(%s::json) AS v (task_id text, {', '.join(f'{column} bigint' for column in columns)}) "
            "ON CONFLICT (task_id, shard) DO UPDATE SET "
            + ", ".join(f"{column} = {counters}.{column} + excluded.{column}" for column in columns)
            + ", updated_at = excluded.updated_at"
        ),
        started=f"UPDATE {tasks} SET started_at = %s WHERE id = ANY(%s::text[]) AND started_at IS NULL",  # noqa: S608
        reopened=f"UPDATE {tasks} SET finished_at = NULL, revision = revision + 1, updated_at = %s WHERE id = ANY(%s::text[])",  # noqa: S608
        progress=f"SELECT {_progress_columns('t')} FROM {tasks} t WHERE t.id = ANY(%s::text[]) AND t.finished_at IS NULL",  # noqa: S608
    )


def _transition(changes: Sequence[Change], states: dict[str, _EventState]) -> tuple[list[bool], set[str]]:
    """Apply ``changes`` in order to the read ``states`` (in memory): for each change whether it
    changed its event, and the tasks of events found final already (late duplicates)."""
    results: list[bool] = []
    final_seen: set[str] = set()
    for change in changes:
        state = states.get(change.job_id)
        transition = change.transition
        if state is None or (state.status, state.final) not in transition.allowed:
            if state is not None and state.final:
                final_seen.add(state.task_id)  # a late duplicate: see launching.settle_check
            results.append(False)
            continue
        if transition.to_status is not None:
            state.status, state.final = transition.to_status, transition.to_final
        if change.entries or change.message is not None:
            added = list(change.entries)
            if change.message is not None:
                added.append(message_entry(state.status, change.message, at=change.at))
            state.messages = capped([*(state.messages or []), *added])
        state.attempts += transition.counts_attempt
        state.changes += 1
        state.updated_at = change.at
        results.append(True)
    return results, final_seen


def _write_postgresql(changed: Sequence[_EventState], deltas: dict[str, _TaskDelta], shard: int, now: datetime) -> list[TaskProgress]:
    """The batch in one statement: the events, the counter shard, and each task's progress as
    this transaction sees it (its own shard row as just updated, the others as committed when
    the statement started)."""
    events_sql, events_params = _events_update(changed)
    counts_sql, counts_params = _counts_upsert(deltas, shard, now)
    tasks = connection.ops.quote_name(Task._meta.db_table)
    counters = connection.ops.quote_name(TaskCounter._meta.db_table)
    # Identifiers from model metadata only; every value is a parameter.
    others = f"(SELECT SUM(o.settled) FROM {counters} o WHERE o.task_id = t.id AND o.shard <> c.shard)"  # noqa: S608
    sql = (
        f"WITH events AS ({events_sql}), counters AS ({counts_sql} RETURNING task_id, shard, settled) "  # noqa: S608
        f"SELECT {_progress_columns('t', f'c.settled + COALESCE({others}, 0)')} FROM counters c JOIN {tasks} t ON t.id = c.task_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*events_params, *counts_params])
        return [TaskProgress.from_row(row) for row in cursor.fetchall()]


def _write_one_by_one(changed: Sequence[_EventState], deltas: dict[str, _TaskDelta], shard: int, now: datetime) -> list[TaskProgress]:
    """SQLite (in-process statements, one writer at a time): a statement per table, then the
    tasks' progress read back."""
    table = connection.ops.quote_name(Event._meta.db_table)
    adapt = connection.ops.adapt_datetimefield_value
    counts_sql, counts_params = _counts_upsert(deltas, shard, now)
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET status = %s, is_final = %s, attempts = attempts + %s, revision = revision + %s, "  # noqa: S608
            "updated_at = %s, messages = COALESCE(%s, messages) WHERE id = %s",
            [
                (state.status, state.final, state.attempts, state.changes, adapt(state.updated_at), _messages_json(state), state.id)
                for state in changed
            ],
        )
        cursor.execute(counts_sql, counts_params)
    return progress(sorted(deltas), unfinished_only=False)


def _progress_columns(alias: str, settled: str | None = None) -> str:
    """What ``TaskProgress.from_row`` reads, of the task table named ``alias`` (``settled``: the
    expression of its settled events; by default the sum of its counter shards)."""
    if settled is None:
        counters = connection.ops.quote_name(TaskCounter._meta.db_table)
        settled = f"(SELECT COALESCE(SUM(c.settled), 0) FROM {counters} c WHERE c.task_id = {alias}.id)"  # noqa: S608
    return (
        f"{alias}.id, {alias}.total, {settled}, CASE WHEN {alias}.finished_at IS NULL THEN 1 ELSE 0 END, {alias}.then_class, "
        f"{alias}.then_queued, CASE WHEN {alias}.on_complete_class <> '' OR {alias}.on_success_class <> '' THEN 1 ELSE 0 END"
    )


@dataclass(frozen=True, slots=True)
class TaskProgress:
    """A task row as the finish check reads it."""

    task_id: str
    total: int
    settled: int
    unfinished: bool
    then_class: str
    then_queued: bool
    #: An ``on_complete`` or ``on_success`` class is set (a task without one finishes without
    #: reading them).
    has_callbacks: bool

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> TaskProgress:
        task_id, total, settled, unfinished, then_class, then_queued, callbacks = row
        return cls(str(task_id), int(total), int(settled), bool(unfinished), str(then_class), bool(then_queued), bool(callbacks))

    @property
    def complete(self) -> bool:
        """Unfinished, and every event settled: time to finish it (or add its follow-up job)."""
        return self.unfinished and self.settled >= self.total


def _read_states(job_ids: Sequence[str], wanted: set[str]) -> dict[str, _EventState]:
    """The events of ``job_ids``, locked for this transaction where the database locks rows, with
    the messages of those in ``wanted`` (the others' are not read: they can be long)."""
    if not job_ids:
        return {}
    table = connection.ops.quote_name(Event._meta.db_table)
    placeholders = ", ".join(["%s"] * len(job_ids))
    wanted_ids = [job_id for job_id in job_ids if job_id in wanted] or [""]
    wanted_placeholders = ", ".join(["%s"] * len(wanted_ids))
    # Identifiers from model metadata only; every value is a parameter.
    sql = (
        f"SELECT id, job_id, task_id, status, is_final, CASE WHEN job_id IN ({wanted_placeholders}) THEN messages END "  # noqa: S608
        f"FROM {table} WHERE job_id IN ({placeholders})"
    )
    if connection.features.has_select_for_update:
        sql += " ORDER BY id FOR UPDATE"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*wanted_ids, *job_ids])
        rows = cursor.fetchall()
    states = {}
    for event_id, job_id, task_id, status, final, messages in rows:
        state = _EventState(event_id, task_id, status, bool(final), (status, bool(final)))
        if job_id in wanted:
            if isinstance(messages, str):  # SQLite returns JSON as text
                messages = json.loads(messages)
            state.messages = list(messages or [])
        states[job_id] = state
    return states


def _messages_json(state: _EventState) -> str | None:
    return None if state.messages is None else json.dumps(state.messages)


def _events_update(changed: Sequence[_EventState]) -> tuple[str, list[Any]]:
    """PostgreSQL: one UPDATE of every changed event."""
    table = connection.ops.quote_name(Event._meta.db_table)
    values = ", ".join(["(%s::bigint, %s::text, %s::boolean, %s::int, %s::int, %s::timestamptz, %s::jsonb)"] * len(changed))
    params: list[Any] = []
    for state in changed:
        params += [state.id, state.status, state.final, state.attempts, state.changes, state.updated_at, _messages_json(state)]
    sql = (
        f"UPDATE {table} AS e SET status = v.status, is_final = v.final, attempts = e.attempts + v.attempts, "  # noqa: S608
        "revision = e.revision + v.changes, updated_at = v.updated_at, messages = COALESCE(v.messages, e.messages) "
        f"FROM (VALUES {values}) AS v (id, status, final, attempts, changes, updated_at, messages) WHERE e.id = v.id"
    )
    return sql, params


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
    sql, params = _counts_upsert({task_id: delta}, shard, now)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _counts_upsert(deltas: dict[str, _TaskDelta], shard: int, now: datetime) -> tuple[str, list[Any]]:
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
    return sql, [value for row in rows for value in row]


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


def progress(task_ids: Sequence[str], *, unfinished_only: bool = True) -> list[TaskProgress]:
    """The rows of ``task_ids`` as the finish check reads them (only the unfinished ones, unless
    ``unfinished_only`` is False)."""
    if not task_ids:
        return []
    tasks = connection.ops.quote_name(Task._meta.db_table)
    placeholders = ", ".join(["%s"] * len(task_ids))
    sql = f"SELECT {_progress_columns('t')} FROM {tasks} t WHERE t.id IN ({placeholders})"  # noqa: S608
    if unfinished_only:
        sql += " AND t.finished_at IS NULL"
    with connection.cursor() as cursor:
        cursor.execute(sql, list(task_ids))
        return [TaskProgress.from_row(row) for row in cursor.fetchall()]


def lock_task(task_id: str) -> None:
    """Lock the task row until commit where the database locks rows (PostgreSQL)."""
    if connection.features.has_select_for_update:
        list(Task.objects.select_for_update().filter(pk=task_id).values_list("pk"))


def is_cancelled(task_id: str) -> bool:
    """Whether the task was cancelled (no follow-up job is added to it then)."""
    return Task.objects.filter(pk=task_id, cancelled_at__isnull=False).exists()


def mark_finished(task_id: str, now: datetime) -> bool:
    """Set ``finished_at`` unless set already; True for the one caller that set it."""
    unfinished = Task.objects.filter(pk=task_id, finished_at__isnull=True)
    return bool(unfinished.update(finished_at=now, revision=F("revision") + 1, updated_at=now))


def _settled_sum() -> Subquery:
    return Subquery(TaskCounter.objects.filter(task_id=OuterRef("pk")).values("task_id").annotate(total=Sum("settled")).values("total"))


def claim_follow_up(task_id: str, now: datetime) -> tuple[str, list[Any]] | None:
    """Once every event of the task has settled, claim its ``then_class`` job: (wire name, args),
    with the task's total grown by one for it. None when it is not time yet, or already claimed.

    A conditional UPDATE (``then_queued = false``) makes this happen once per task, however many
    last events race; the caller records the job's event (``add_events``) and pushes it.
    """
    due = list(
        Task.objects.filter(pk=task_id, then_queued=False, cancelled_at__isnull=True)
        .exclude(then_class="")
        .annotate(settled=Coalesce(_settled_sum(), 0))
        .filter(settled__gte=F("total"))
        .values_list("pk", flat=True)
    )
    # The claim: of racing callers, the one whose UPDATE still finds then_queued false wins.
    if not due or not Task.objects.filter(pk=task_id, then_queued=False).update(
        then_queued=True, total=F("total") + 1, revision=F("revision") + 1, updated_at=now
    ):
        return None
    then_class, then_args = Task.objects.values_list("then_class", "then_args").get(pk=task_id)
    return then_class, list(then_args or [])


def add_events(task_id: str, wire_name: str, queue: str, jobs: Sequence[RecordedJob], now: datetime, *, counted: bool = True) -> None:
    """One ``enqueue`` event per job (``bulk_create``, ``LAUNCH_BATCH_SIZE`` rows a statement) and,
    unless ``counted`` is False (the caller counts them), ``enqueue`` counts in shard 0."""
    Event.objects.bulk_create(
        [
            Event(
                job_id=job_id,
                task_id=task_id,
                job_class=wire_name,
                queue=queue,
                params={"args": args, "kwargs": kwargs} if kwargs else {"args": args},
                created_at=now,
                updated_at=now,
            )
            for job_id, args, kwargs in jobs
        ],
        batch_size=tracking_settings.LAUNCH_BATCH_SIZE,
    )
    if counted and jobs:
        add_counts(task_id, ENQUEUE_SHARD, now, enqueue=len(jobs), changes=len(jobs))


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
            joined = isinstance(task_id, str) and Task.objects.filter(pk=task_id, cancelled_at__isnull=True).update(
                total=F("total") + 1,
                revision=F("revision") + 1,
                updated_at=timestamp,
                finished_at=None,
            )
            if not joined and isinstance(task_id, str) and Task.objects.filter(pk=task_id, cancelled_at__isnull=False).exists():
                raise TaskCancelled(f"task {task_id} was cancelled: no job may join it")
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
                queue=str(item.get("queue") or job_template(str(item.get("class", ""))).queue),
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
