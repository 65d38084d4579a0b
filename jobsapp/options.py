"""Payload option rules: the one place where a push's feature options are validated and stamped.

The producing side's half of "how a feature hooks in" (the consuming side's is the "job ended"
door, ``jobsapp.ending``). ``client`` calls ``stamp(item, ...)`` on every job it pushes, after the
client middleware and before anything is written: each option the item carries goes through its
rule, in the order of ``RULES``, which checks it (ValueError: nothing is written) and stamps what
the option implies into the payload (``expires_at``, ``unique_digest``) or into the returned
``Stamp`` (the unique lock to take with the push, how long to retain the result record).
``sidekiq_options`` calls ``check`` on a class's options, so a bad value fails where the class is
declared. A job with none of the options pays one dict lookup per rule.

Pure: no Redis, no thread, no settings beyond the payload's. The feature modules (``timeouts``,
``expiry``, ``unique``, ``results``) re-export the names they own for their readers, and read
payloads written by other clients with the same rules (``retain`` from another client is
clamped to ``RETAIN_MAX_SECONDS``, not refused: the job has been pushed already).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import keys, priority
from .payload import Item, compact_json

#: The payload field (and sidekiq_options key) of a job's timeout, in seconds (``jobsapp.worker.timeouts``).
TIMEOUT_KEY = "timeout"
#: Seconds a job may wait before it starts (``jobsapp.expiry``), and the absolute expiry Sidekiq
#: Pro writes and reads, epoch seconds.
EXPIRES_IN_KEY = "expires_in"
EXPIRES_AT_KEY = "expires_at"
#: Pro refuses larger values ("expires_in must be a relative time, not absolute time").
MAX_EXPIRES_IN_SECONDS = 1_000_000_000
#: Unique jobs (``jobsapp.unique``): the lock's lifetime, when it is released, and its name in the payload.
UNIQUE_FOR_KEY = "unique_for"
UNIQUE_UNTIL_KEY = "unique_until"
UNTIL_CHOICES = ("start", "success")
DIGEST_KEY = "unique_digest"
#: A job's priority within its queue (``jobsapp.priority``).
PRIORITY_KEY = priority.PRIORITY_KEY
#: Job results (``jobsapp.results``): how long the record lives after the job's last change.
RETAIN_KEY = "retain"
#: The longest ``retain``: a year. A push asking for more is refused; a payload from another
#: client asking for more is kept this long.
RETAIN_MAX_SECONDS = 365 * 24 * 3600


def positive_seconds(value: object, *, option: str) -> float:
    """``value`` as float seconds; ValueError naming ``option`` unless it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{option} must be a positive number of seconds, not {value!r}")
    return float(value)


def timeout_seconds(item: Mapping[str, Any]) -> float | None:
    """The job's timeout in seconds, None when it has none (the option absent or null).

    ValueError when it is not a positive number of seconds: refused at push, and a payload that
    reaches a worker with one anyway (another client wrote it) is parked in the dead set with
    this message rather than run without the limit it asked for."""
    value = item.get(TIMEOUT_KEY)
    if value is None:
        return None
    return positive_seconds(value, option="timeout")


def expires_in_seconds(value: object) -> float:
    """``expires_in`` as float seconds; ValueError unless a positive, relative number of seconds."""
    seconds = positive_seconds(value, option="expires_in")
    if seconds >= MAX_EXPIRES_IN_SECONDS:
        raise ValueError(f"expires_in must be a relative number of seconds, not an epoch time ({value!r})")
    return seconds


def retain_seconds(item: Mapping[str, Any]) -> float | None:
    """The item's ``retain`` in seconds, None when absent (or null/false); ValueError for anything
    but a positive number of seconds up to ``RETAIN_MAX_SECONDS``."""
    value = item.get(RETAIN_KEY)
    if value is None or value is False:
        return None
    seconds = positive_seconds(value, option='"retain"')
    if seconds > RETAIN_MAX_SECONDS:
        raise ValueError(f'"retain" must be at most {RETAIN_MAX_SECONDS} seconds (a year), not {value!r}')
    return seconds


def clamped_retain_seconds(item: Mapping[str, Any]) -> float | None:
    """``retain`` of a payload read back from Redis (perhaps written by another client): clamped
    to ``RETAIN_MAX_SECONDS``; None (no record) when it is not a positive number."""
    value = item.get(RETAIN_KEY)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None  # NaN fails "> 0" too
    try:
        return min(float(value), float(RETAIN_MAX_SECONDS))
    except OverflowError:  # an integer past a float's range
        return float(RETAIN_MAX_SECONDS)


def unique_lock(item: Item, *, scheduled_at: float | None, timestamp: float) -> tuple[str, int]:
    """Validate ``unique_for`` / ``unique_until``, add ``unique_digest`` to ``item``; (lock key,
    TTL in ms). ValueError on a bad option (nothing is written)."""
    unique_for = positive_seconds(item.get(UNIQUE_FOR_KEY), option="unique_for")
    until = item.get(UNIQUE_UNTIL_KEY, "success")
    if until not in UNTIL_CHOICES:
        raise ValueError(f'unique_until must be "start" or "success", not {until!r}')
    identity = compact_json(
        [item.get("class"), item.get("queue"), item.get("args", []), item.get("kwargs") or {}],
        sort_keys=True,
        allow_nan=True,
    )
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()
    item[DIGEST_KEY] = digest
    delay_seconds = max(0.0, (scheduled_at or timestamp) - timestamp)
    return keys.unique_lock(digest), max(1, math.ceil((unique_for + delay_seconds) * 1000))


@dataclass(slots=True, kw_only=True)
class Stamp:
    """What a push writes besides the job itself, as the rules decided."""

    scheduled_at: float | None  # the run-at time of a scheduled job; None: enqueued now
    timestamp: float  # the push's time
    unique_lock: tuple[str, int] | None = None  # (lock key, TTL ms): taken with the push, or refused
    retain_seconds: float | None = None  # the result record's lifetime after its last change
    priority: int | None = None  # the job's priority (jobsapp.priority); None: a plain job, in queue:<name>


def _timeout_rule(item: Item, stamp: Stamp) -> None:
    timeout_seconds(item)


def stamp_expires_at(item: Item, *, scheduled_at: float | None, timestamp: float) -> None:
    """Give a job with ``expires_in`` Sidekiq Pro's ``expires_at``, from its run-at time (unless it
    has one: a job pushed again keeps its expiry). ValueError on a bad ``expires_in``."""
    seconds = expires_in_seconds(item.get(EXPIRES_IN_KEY))
    if EXPIRES_AT_KEY not in item:
        item[EXPIRES_AT_KEY] = (scheduled_at if scheduled_at is not None else timestamp) + seconds


def _expires_rule(item: Item, stamp: Stamp) -> None:
    stamp_expires_at(item, scheduled_at=stamp.scheduled_at, timestamp=stamp.timestamp)


def _unique_rule(item: Item, stamp: Stamp) -> None:
    stamp.unique_lock = unique_lock(item, scheduled_at=stamp.scheduled_at, timestamp=stamp.timestamp)


def _retain_rule(item: Item, stamp: Stamp) -> None:
    stamp.retain_seconds = retain_seconds(item)


def _priority_rule(item: Item, stamp: Stamp) -> None:
    if item[priority.PRIORITY_KEY] is None:
        del item[priority.PRIORITY_KEY]
        return
    level = priority.checked(item[priority.PRIORITY_KEY])
    if level == priority.DEFAULT_PRIORITY:  # no priority: the payload stays Sidekiq's, byte for byte
        del item[priority.PRIORITY_KEY]
        return
    if UNIQUE_FOR_KEY in item:
        raise ValueError("a unique job (unique_for) cannot have a priority: its lock is taken with a push to the queue's list")
    item[priority.PRIORITY_KEY] = level
    stamp.priority = level


#: A rule checks its option in the item (ValueError) and stamps what it implies.
Rule = Callable[[Item, Stamp], None]

#: (payload option, rule), applied in this order to every pushed item that carries the option.
#: A feature with a payload option adds a row here (and its row to ``jobsapp.ending.FEATURES``).
RULES: list[tuple[str, Rule]] = [
    (TIMEOUT_KEY, _timeout_rule),
    (EXPIRES_IN_KEY, _expires_rule),
    (UNIQUE_FOR_KEY, _unique_rule),
    (RETAIN_KEY, _retain_rule),
    (priority.PRIORITY_KEY, _priority_rule),
]


def stamp(item: Item, *, scheduled_at: float | None, timestamp: float) -> Stamp:
    """Apply every rule whose option ``item`` carries (``item`` is changed in place); ValueError
    on a bad option, before anything is written."""
    result = Stamp(scheduled_at=scheduled_at, timestamp=timestamp)
    for key, rule in RULES:
        if key in item:
            rule(item, result)
    return result


def check(options: Mapping[str, Any]) -> None:
    """Validate a job class's ``sidekiq_options`` (ValueError where the class is declared)."""
    stamp({"class": "", "args": [], **options}, scheduled_at=None, timestamp=0.0)
