"""PostgreSQL: a recording thread's batch in one round trip, when the database can decide it.

``recorder.write_committed`` reads the events first and decides each transition in Python, so a
batch takes two round trips (the read, then the writes). Most batches need no such read: a job's
run (``start``, then ``finish``, ``failed`` or ``error``) and the engine's ``retry`` and ``dead``
all start from the same states (any unfinished ``enqueue``, ``working`` or ``error``: the
transitions' ``allowed``) and each sets a status. From any of those states, a job's changes in a
batch then end the same way: applied in order up to the first one that makes the event final,
the rest refused. So Python composes each job's outcome once (``recorder._transition`` on an
unfinished state) and one call applies it to every event found unfinished:
``tracking_apply_batch`` (migration 0004, PL/pgSQL so that its plan is cached per connection:
planning the statement cost more than running it, and client-side prepared statements are what
poolers in transaction mode refuse). It locks the jobs' events in id order, updates those in an
allowed state (messages appended, then capped as ``transitions.capped`` does), moves this
writer's counter shard by the states the events really left, stamps the task's ``started_at``
once, and returns each locked event's state before the batch.

That call goes with ``BEGIN`` before it, ``COMMIT`` after it and the progress read of the tasks
the batch may settle (the ones the jobs' payloads name, ``Change.task_id``) in one pipeline: one
round trip. ``recorder._transition`` on the states it returns gives each change's result, exactly
what the function applied. A task the batch settled events of that no payload named (a duplicate
finding its event final, a hint missing) is read in a second round trip.

Exact under at-least-once delivery as the two-trip path is: the events are locked in id order,
the counts move in the same statement by the states the events really had, and the progress read
follows the commit, so of two batches settling a task's last events the one that commits last
sees them all. Changes whose event is missing and that carry the job's payload are left to the
caller (``launching.apply``), which records them the slower way after this commit.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from .models import Task
from .recorder import TaskProgress, _count_deltas, _EventState, _progress_columns, _transition
from .transitions import MAX_MESSAGES, Change


def open_statuses(changes: Sequence[Change]) -> list[str] | None:
    """The unfinished statuses every change of ``changes`` may start from, when this path can
    apply them: every change sets a status, all start from the same unfinished states, and each
    one that leaves the event unfinished leaves it in one of those. None otherwise (a progress
    message, a requeue, a reopen: ``recorder.write_committed``'s two round trips)."""
    allowed = changes[0].transition.allowed
    if any(final for _, final in allowed):
        return None
    for change in changes:
        transition = change.transition
        if transition.allowed != allowed or transition.to_status is None:
            return None
        if not transition.to_final and (transition.to_status, False) not in allowed:
            return None
    return sorted(status for status, _ in allowed)


@dataclass(frozen=True, slots=True)
class Written:
    """What ``write`` did: for each change whether it changed its event (False for the ones in
    ``leftover``, not written); the tasks complete after its commit (unfinished, every event
    settled: not locked); the positions of the changes left to the caller; the batch's time."""

    results: list[bool]
    complete: list[TaskProgress]
    leftover: list[int]
    now: datetime


def write(changes: Sequence[Change], shard: int, statuses: Sequence[str]) -> Written:
    """Apply ``changes`` (``open_statuses`` said this path can, giving ``statuses``) in a
    transaction of their own, committed before this returns; counts in ``shard``."""
    import psycopg  # PostgreSQL only: see recorder.can_write_committed

    outcomes = _outcomes(changes, statuses[0])
    now = max(change.at for change in changes)
    hinted = sorted({hint for change in changes if change.transition.to_final and (hint := _task_hint(change))})
    sql = _sql()
    connection.ensure_connection()
    raw = connection.connection
    with connection.wrap_database_errors:
        cursor, main, check = psycopg.Cursor(raw), psycopg.Cursor(raw), psycopg.Cursor(raw)
        with raw.pipeline() as pipeline:
            cursor.execute("BEGIN")
            job_ids = json.dumps([row["job_id"] for row in outcomes])
            main.execute(sql.apply, [json.dumps(outcomes), job_ids, list(statuses), now, shard, MAX_MESSAGES - 1])
            cursor.execute("COMMIT")
            if hinted:
                check.execute(sql.progress, [hinted])
            pipeline.sync()
            rows = main.fetchall()
            seen = {row[0]: TaskProgress.from_row(row) for row in check.fetchall()} if hinted else {}
        states = {job_id: _EventState(0, task_id, status, final, (status, final)) for job_id, task_id, status, final in rows}
        leftover = [index for index, change in enumerate(changes) if change.job_id not in states and change.item is not None]
        skipped = set(leftover)
        applied, final_seen = _transition([change for index, change in enumerate(changes) if index not in skipped], states)
        results = iter(applied)
        deltas = _count_deltas([state for state in states.values() if state.changes])
        checked = {task_id for task_id, delta in deltas.items() if delta.counts["settled"] > 0} | final_seen
        unread = sorted(checked - set(hinted))
        if unread:
            check.execute(sql.progress, [unread])
            seen.update((row[0], TaskProgress.from_row(row)) for row in check.fetchall())
    complete = [seen[task_id] for task_id in sorted(checked) if task_id in seen and seen[task_id].complete]
    return Written([False if index in skipped else next(results) for index in range(len(changes))], complete, leftover, now)


def _task_hint(change: Change) -> str | None:
    """The task the job's payload names (the event's row decides; this only says which task's
    progress to read in the same round trip)."""
    if change.task_id is not None:
        return change.task_id
    task_id = change.item.get("task_id") if change.item is not None else None
    return task_id if isinstance(task_id, str) else None


def _outcomes(changes: Sequence[Change], status: str) -> list[dict[str, object]]:
    """Each job's changes composed from an unfinished state (``status``, one they may all start
    from; which one does not matter: see ``open_statuses``): the event's new status, finality,
    attempts and changes added, time, and the messages to append (None: none)."""
    job_ids = list(dict.fromkeys(change.job_id for change in changes))
    states = {job_id: _EventState(0, "", status, False, (status, False)) for job_id in job_ids}
    _transition(changes, states)
    return [
        {
            "job_id": job_id,
            "status": state.status,
            "final": state.final,
            "attempts": state.attempts,
            "changes": state.changes,
            "updated_at": state.updated_at.isoformat(),  # type: ignore[union-attr]
            "messages": state.messages,
        }
        for job_id, state in states.items()
    ]


@dataclass(frozen=True, slots=True)
class _Sql:
    apply: str
    progress: str


@functools.cache
def _sql() -> _Sql:
    """The statements (identifiers from model metadata only; every value is a parameter)."""
    tasks = connection.ops.quote_name(Task._meta.db_table)
    return _Sql(
        apply="SELECT * FROM tracking_apply_batch(%s::json, %s::json, %s::text[], %s::timestamptz, %s::integer, %s::integer)",
        progress=f"SELECT {_progress_columns('t')} FROM {tasks} t WHERE t.id = ANY(%s::text[]) AND t.finished_at IS NULL",  # noqa: S608
    )


def available() -> bool:
    """Whether this connection's database has ``tracking_apply_batch`` (migration 0004): looked up
    once per connection."""
    connection.ensure_connection()
    raw = connection.connection
    known = getattr(connection, "_tracking_apply_batch", None)
    if known is None or known[0] is not raw:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regprocedure('tracking_apply_batch(json, json, text[], timestamptz, integer, integer)') IS NOT NULL")
            known = (raw, bool(cursor.fetchone()[0]))
        connection._tracking_apply_batch = known  # type: ignore[attr-defined]
    return bool(known[1])
