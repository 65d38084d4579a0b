"""Expiring jobs: ``sidekiq_options(expires_in=seconds)``, as Sidekiq Pro's ``sidekiq/pro/expiry``.

A job that has not *started* by its expiry is never run. The payload field is Pro's:

- at push (``client``), a job with ``expires_in`` and no ``expires_at`` gets ``expires_at`` =
  (its run-at time, or now) + ``expires_in``, float epoch seconds; ``expires_in`` rides along.
  So a job scheduled two hours ahead with one hour to live expires three hours from its push, and
  a Ruby Sidekiq Pro worker reads the field the same way (both directions).
- when fetched (``processor``, before the class is looked up, before any middleware or
  ``perform``): past ``expires_at`` the job is acknowledged and dropped, one warning is logged,
  ``jobsapp:stat:expired`` and its daily counter are incremented (``count``; it also counts as
  processed, as Sidekiq Pro counts it), server middleware hears
  ``on_dead(reason=DeadReason.EXPIRED)`` with no exception, and the "job ended" door
  (``jobsapp.ending``) settles its features: a unique job's lock is released, a batch counts it
  as succeeded (Pro's rule), a retained record says failed with reason ``expired``.
- ``expires_at`` is absolute: a retry due after it is dropped the same way when fetched.

Jobs without ``expires_at`` cost one dict lookup in the processor. No thread of its own; the
counters are written by the processor thread that dropped the job (a Redis error there is logged
by the processor: the job is dropped anyway, uncounted). This module decides and counts; the
processor drops.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import keys
from .payload import Item, timestamp_seconds

if TYPE_CHECKING:
    import redis

logger = logging.getLogger("jobsapp.expiry")

#: The sidekiq_options key: seconds a job may wait before it starts.
EXPIRES_IN_KEY = "expires_in"
#: The payload field Sidekiq Pro writes and reads: the absolute expiry, epoch seconds.
EXPIRES_AT_KEY = "expires_at"
#: Pro refuses larger values ("expires_in must be a relative time, not absolute time").
MAX_EXPIRES_IN_SECONDS = 1_000_000_000
#: The daily counter's lifetime (Sidekiq's for its daily stats).
DAILY_TTL_SECONDS = 5 * 365 * 24 * 3600


def expires_in_seconds(value: object) -> float:
    """``expires_in`` as float seconds; ValueError unless a positive, relative number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"expires_in must be a positive number of seconds, not {value!r}")
    if value >= MAX_EXPIRES_IN_SECONDS:
        raise ValueError(f"expires_in must be a relative number of seconds, not an epoch time ({value!r})")
    return float(value)


def stamp(item: Item, *, scheduled_at: float | None, timestamp: float) -> None:
    """Give a job with ``expires_in`` its ``expires_at`` (unless it has one: a job pushed again
    keeps its expiry). ValueError on a bad ``expires_in``: nothing is written."""
    seconds = expires_in_seconds(item.get(EXPIRES_IN_KEY))
    if EXPIRES_AT_KEY not in item:
        item[EXPIRES_AT_KEY] = (scheduled_at if scheduled_at is not None else timestamp) + seconds


def is_expired(item: Mapping[str, Any], now: float) -> bool:
    """Whether the job's ``expires_at`` has passed. A field that is not a time (another client
    wrote it) never expires the job: it runs, rather than being dropped on a guess."""
    expires_at = timestamp_seconds(item.get(EXPIRES_AT_KEY))
    return expires_at is not None and now > expires_at


def count(client: redis.Redis, *, today: dt.date) -> None:
    """One more expired job: the lifetime and the daily counter (Redis errors propagate)."""
    daily = keys.stat_expired_daily(today)
    pipe = client.pipeline(transaction=False)
    pipe.incr(keys.STAT_EXPIRED)
    pipe.incr(daily)
    pipe.expire(daily, DAILY_TTL_SECONDS)
    pipe.execute()
