"""The task summary a frontend polls (``GET /api/tasks/<id>/``), read in one statement.

A page polls it every second while a task runs, on a machine busy running that task's jobs, so
each poll should need as little of a core and as few database round trips as possible. The ORM's
``Task.objects.with_counts()`` builds and compiles its query on every call, and the progress of a
running task reads the running jobs' reported fractions with a second query. ``read`` sends one
statement of fixed text instead: the task row, its counter shards summed, and on PostgreSQL the
messages of its started, unsettled jobs (only when its progress needs them: the same condition
as ``Task.running_fraction``, decided in the statement). Other databases read those with the
model's own second query (SQLite has no round trip to save). It returns a ``Task`` whose counts
and running fraction are already filled in, so its properties (``status``, ``progress``, ``etag``)
and the ``TaskSerializer`` read no more. Scoped by ``permissions.visible_tasks_sql``, the
API's one rule.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from django.db import connection

from .models import TALLY_FIELDS, Event, Task, TaskCounter, highest_fraction
from .permissions import visible_tasks_sql

_READ = frozenset(
    ("id", "name", "owner_id", "total", "launching", "revision", "created_at", "updated_at", "started_at", "finished_at", "cancelled_at")
)
#: The task columns the summary reads, in the model's field order (``Model.from_db`` wants it;
#: the rest of the row is deferred).
TASK_FIELDS = tuple(field.attname for field in Task._meta.concrete_fields if field.attname in _READ)
#: Columns returned as datetimes (converted from text where the database returns text).
_DATETIMES = frozenset(index for index, name in enumerate(TASK_FIELDS) if name.endswith("_at"))


@functools.cache
def _statement(vendor: str, scope: str) -> str:
    """The summary's SQL (identifiers from model metadata; every value is a parameter): the task
    id twice, then the parameters of ``scope`` (``visible_tasks_sql``'s condition on ``t``)."""
    quote = connection.ops.quote_name
    tasks, counters, events = (quote(model._meta.db_table) for model in (Task, TaskCounter, Event))
    sums = ", ".join(f"SUM(s.{quote(name)}) AS {quote(name)}" for name in TALLY_FIELDS)
    running = "NULL"
    if vendor == "postgresql":
        running = (
            "CASE WHEN t.finished_at IS NULL AND t.started_at IS NOT NULL AND COALESCE(c.settled, 0) < t.total THEN "  # noqa: S608
            f"(SELECT COALESCE(json_agg(e.messages), '[]') FROM {events} e "
            "WHERE e.task_id = t.id AND NOT e.is_final AND e.attempts > 0) END"
        )
    return (
        f"SELECT {', '.join(f't.{quote(name)}' for name in TASK_FIELDS)}, "  # noqa: S608
        f"{', '.join(f'c.{quote(name)}' for name in TALLY_FIELDS)}, c.updated_at, {running} "
        f"FROM {tasks} t LEFT JOIN (SELECT s.task_id, {sums}, MAX(s.updated_at) AS updated_at FROM {counters} s "
        f"WHERE s.task_id = %s GROUP BY s.task_id) c ON c.task_id = t.id WHERE t.id = %s AND {scope}"
    )


def read(task_id: str, user: Any) -> Task | None:
    """The task ``task_id`` as ``user`` may see it, with its counts (and running fraction) filled
    in; None when it does not exist or is not theirs."""
    visible = visible_tasks_sql(user, "t")
    if visible is None:  # anonymous: nothing is visible
        return None
    scope, params = visible
    with connection.cursor() as cursor:
        cursor.execute(_statement(connection.vendor, scope), [task_id, task_id, *params])
        row = cursor.fetchone()
    if row is None:
        return None
    convert = getattr(connection.ops, "convert_datetimefield_value", None)
    values = list(row[: len(TASK_FIELDS)])
    if convert is not None:  # databases that hand datetimes over as text (SQLite)
        for index in _DATETIMES:
            values[index] = convert(values[index], None, connection)
    task = Task.from_db(connection.alias, list(TASK_FIELDS), values)
    tallies = row[len(TASK_FIELDS) : len(TASK_FIELDS) + len(TALLY_FIELDS)]
    counted_at = row[len(TASK_FIELDS) + len(TALLY_FIELDS)]
    if convert is not None:
        counted_at = convert(counted_at, None, connection)
    tally: dict[str, Any] = {name: int(value or 0) for name, value in zip(TALLY_FIELDS, tallies, strict=True)}
    tally["updated_at"] = counted_at
    task.__dict__["_tally"] = tally
    running = row[-1]
    if connection.vendor == "postgresql":
        if isinstance(running, (str, bytes)):
            running = json.loads(running)
        # None: the statement found the progress needs no fractions (not started, finished, settled)
        task.__dict__["_running_fraction"] = sum(highest_fraction(list(messages or [])) for messages in running or [])
    return task
