"""Priorities within a queue: which jobs of a queue run first.

A job's ``priority`` is a whole number from -100 to 100, higher first, as ``django.tasks``
defines it; 0 is the default and means "no priority". It rides in the payload as the extra key
``priority`` (``sidekiq_options(priority=...)``, ``Job.set(priority=...)``, a raw item's
``"priority"``); a job whose priority is 0 or absent carries no such key and lives in Sidekiq's
``queue:<name>`` LIST, byte for byte as before.

A job with another priority lives in a ZSET of our own, ``jobsapp:pqueue:<name>``
(``keys.priority_queue``), which Ruby processes never read. Its score is the job's *rank*:
``(100 - priority) * LEVEL + HALF + n`` where ``n`` comes from one counter
(``keys.PRIORITY_SEQUENCE``), so the lowest score runs first and jobs of one priority run in
the order they were pushed (FIFO). A job put back at the front of its queue (a requeue at
shutdown, a recovery) gets ``HALF - n`` instead: ahead of every other job of its priority. The
rank of priority 0 (``ZERO_RANK``) splits the ZSET: jobs ranked below it run before the
queue's plain LIST, the others after it. The set ``keys.PRIORITISED`` indexes the queues whose
ZSET holds jobs; ``fetch.lua`` reads it once per call and looks at a queue's ZSET only when the
queue is in it, so a queue of plain jobs pays one ``SCARD`` per fetch and no round trip.
A prioritised push also leaves a token in the queue's wake list (``keys.priority_wake``), on
which an idle worker that has seen prioritised jobs waits beside the queue's list.

Pushes route here: ``client`` (a prioritised job goes through ``priority_push.lua``), and the
scripts that push a job they read back from Redis (``schedule_move``, ``requeue``,
``recover_requeue``) ask ``of_raw`` for the payload's priority. Fairness is strict: a queue's
lower priorities wait as long as higher ones keep arriving (docs/features/priorities.md).

Pure: no Redis, no thread, no settings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: The payload field (and sidekiq_options key) of a job's priority.
PRIORITY_KEY = "priority"
#: Django's range (``django.tasks``' TASK_MIN_PRIORITY / TASK_MAX_PRIORITY); higher runs first.
MIN_PRIORITY = -100
MAX_PRIORITY = 100
DEFAULT_PRIORITY = 0

#: The width of one priority's share of ranks, and the middle of it (both exact in a double:
#: 201 levels of 2**45 stay below 2**53).
LEVEL = 2**45
HALF = 2**44
#: The rank of priority 0: the queue's plain LIST sits here, between the two halves of the ZSET.
ZERO_RANK = (MAX_PRIORITY - DEFAULT_PRIORITY) * LEVEL

#: Celery's priorities on its Redis transport: 0 (the default, the most urgent) to 9, lower first.
CELERY_MAX_PRIORITY = 9
#: One step of Celery's scale on ours: Celery's ``n`` is ``-CELERY_STEP * n`` (0 stays a plain job).
CELERY_STEP = 10

_MARK = b'"priority":'


def checked(value: object) -> int:
    """``value`` as a priority; ValueError unless a whole number from -100 to 100."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ValueError(f"priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}, not {value!r}")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValueError(f"priority must be a whole number from {MIN_PRIORITY} to {MAX_PRIORITY}, not {value!r}")
    return int(value)


def from_celery(value: object) -> int:
    """Celery's ``priority=`` (Redis transport: 0..9, lower first, 0 for a task without one) as
    ours: ``-10 * value``, so Celery's 0 is a plain job and 9 is -90. ValueError outside 0..9."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= CELERY_MAX_PRIORITY:
        raise ValueError(f"Celery's priority is a whole number from 0 (first) to {CELERY_MAX_PRIORITY} (last), not {value!r}")
    return -CELERY_STEP * value


def to_celery(level: int | None) -> int | None:
    """Our priority as Celery's ``delivery_info["priority"]`` (the inverse of ``from_celery``,
    rounded and kept within 0..9); None for a plain job."""
    if level is None:
        return None
    return max(0, min(CELERY_MAX_PRIORITY, round(-level / CELERY_STEP)))


def of_item(item: Mapping[str, Any]) -> int | None:
    """The priority a pushed payload routes by: None for a plain job (absent, null or 0, and a
    value another client wrote that is not a priority: such a job keeps Sidekiq's layout)."""
    value = item.get(PRIORITY_KEY)
    if value is None:
        return None
    try:
        priority = checked(value)
    except ValueError:  # written by another client: the job stays a plain job
        return None
    return priority or None


def of_raw(raw: bytes | str) -> int | None:
    """The priority of a raw payload read back from Redis (see ``of_item``). A payload without
    the ``"priority":`` mark is not parsed at all, so plain jobs pay one substring search."""
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    if _MARK not in data:
        return None
    try:
        item = json.loads(data)
    except ValueError:  # not JSON: whoever reads it next buries it; it stays a plain job
        return None
    return of_item(item) if isinstance(item, dict) else None


def rank_base(priority: int) -> int:
    """The middle of ``priority``'s share of ranks: pushes go above it, put-backs below."""
    return (MAX_PRIORITY - priority) * LEVEL + HALF
