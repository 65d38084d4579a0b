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

The client sends one statement: ``CALL tracking_record_batch(...)`` (migration 0006), outside
any transaction. The procedure runs that function, commits, and then, in a new snapshot, reads
the progress of the tasks the batch settled events of or found final events of, so the finish
check follows the commit as it must; it returns the events' prior states and those rows as JSON.
One round trip, no ``BEGIN``/``COMMIT`` of the client's. ``recorder._transition`` on the states
it returns gives each change's result, exactly what the function applied.

Exact under at-least-once delivery as the two-trip path is: the events are locked in id order,
the counts move in the same statement by the states the events really had, and the progress read
follows the commit, so of two batches settling a task's last events the one that commits last
sees them all. Changes whose event is missing and that carry the job's payload are left to the
caller (``launching.apply``), which records them the slower way after this commit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from .recorder import TaskProgress, _EventState, _transition
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
    connection.ensure_connection()
    with connection.wrap_database_errors:
        # Server-side binding, whatever cursor_factory Django set; outside any transaction
        # (available() checked autocommit), so the procedure may commit.
        cursor = psycopg.Cursor(connection.connection)
        job_ids = json.dumps([row["job_id"] for row in outcomes])
        cursor.execute(CALL, [json.dumps(outcomes), job_ids, list(statuses), now, shard, MAX_MESSAGES - 1])
        found, progress = cursor.fetchone() or (None, None)
    states = {
        str(job_id): _EventState(0, str(task_id), str(status), bool(final), (str(status), bool(final)))
        for job_id, task_id, status, final in _rows(found)
    }
    leftover = [index for index, change in enumerate(changes) if change.job_id not in states and change.item is not None]
    skipped = set(leftover)
    results = iter(_transition([change for index, change in enumerate(changes) if index not in skipped], states)[0])
    complete = [task for task in map(TaskProgress.from_row, _rows(progress)) if task.complete]
    return Written([False if index in skipped else next(results) for index in range(len(changes))], complete, leftover, now)


def _rows(document: Any) -> list[Any]:
    """A JSON array of rows as the procedure returns it (text or parsed, as the connection's
    loaders hand it over; NULL when empty)."""
    if document is None:
        return []
    return list(json.loads(document) if isinstance(document, (str, bytes)) else document)


def _outcomes(changes: Sequence[Change], status: str) -> list[dict[str, object]]:
    """Each job's changes composed from an unfinished state (``status``, one they may all start
    from; which one does not matter: see ``open_statuses``): the event's new status, finality,
    attempts and changes added, time, and the messages to append (None: none)."""
    if any(change.message is not None or change.entries for change in changes):
        job_ids = list(dict.fromkeys(change.job_id for change in changes))
        states = {job_id: _EventState(0, "", status, False, (status, False)) for job_id in job_ids}
        _transition(changes, states)
        return [{"job_id": job_id, **state.written()} for job_id, state in states.items()]
    # No messages (a batch of runs, the common case): the same composition as _transition's,
    # without an _EventState per job; a row is [status, final, attempts, changes, time].
    rows: dict[str, list[Any]] = {}
    for change in changes:
        row = rows.get(change.job_id)
        if row is None:
            row = rows[change.job_id] = [status, False, 0, 0, change.at]
        transition = change.transition
        if (row[0], row[1]) not in transition.allowed:
            continue
        if transition.to_status is not None:
            row[0], row[1] = transition.to_status, transition.to_final
        row[2] += transition.counts_attempt
        row[3] += 1
        row[4] = change.at
    return [
        {"job_id": job_id, "status": to, "final": final, "attempts": attempts, "changes": count, "updated_at": at.isoformat()}
        for job_id, (to, final, attempts, count, at) in rows.items()
    ]


#: The procedure of migration 0006 (its two INOUT results passed as NULL).
CALL = "CALL tracking_record_batch(%s::json, %s::json, %s::text[], %s::timestamptz, %s::integer, %s::integer, NULL, NULL)"
PROCEDURE = "tracking_record_batch(json, json, text[], timestamptz, integer, integer, json, json)"


def available() -> bool:
    """Whether this path can run here: outside any transaction in autocommit (the procedure
    commits), on a database that has the procedure (migration 0006; looked up once per
    connection)."""
    connection.ensure_connection()
    if not connection.get_autocommit():
        return False
    raw = connection.connection
    known = getattr(connection, "_tracking_record_batch", None)
    if known is None or known[0] is not raw:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regprocedure(%s) IS NOT NULL", [PROCEDURE])
            row = cursor.fetchone()
            known = (raw, bool(row and row[0]))
        connection._tracking_record_batch = known  # type: ignore[attr-defined]
    return bool(known[1])
