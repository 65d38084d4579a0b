"""Expiring jobs: ``sidekiq_options(expires_in=seconds)``, as Sidekiq Pro's ``sidekiq/pro/expiry``.

A job that has not *started* by its expiry is never run. The payload field is Pro's:

- at push (``client``), a job with ``expires_in`` and no ``expires_at`` gets ``expires_at`` =
  (its run-at time, or now) + ``expires_in``, float epoch seconds; ``expires_in`` rides along.
  So a job scheduled two hours ahead with one hour to live expires three hours from its push, and
  a Ruby Sidekiq Pro worker reads the field the same way (both directions).
- when fetched (the door's ``admit`` moment, ``jobsapp.ending``'s ``expiry`` row, before the
  class is looked up, before any middleware or ``perform``): past ``expires_at`` the job is
  acknowledged and dropped, one warning is logged,
  ``jobsapp:stat:expired`` and its daily counter are incremented (``count``; it also counts as
  processed, as Sidekiq Pro counts it), server middleware hears
  ``on_dead(reason=DeadReason.EXPIRED)`` with no exception, and the "job ended" door
  (``jobsapp.ending``) settles its features: a unique job's lock is released, a batch counts it
  as succeeded (Pro's rule), a retained record says failed with reason ``expired``.
- ``expires_at`` is absolute: a retry due after it is dropped the same way when fetched.

Jobs without ``expires_at`` cost one dict lookup in the door's table. No thread of its own; the
counters are written by the processor thread that dropped the job (a Redis error there is logged:
the job is dropped anyway, uncounted). This module decides and counts; the door's expiry row
calls it, and the processor acknowledges the job the row ended.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import keys
from .options import EXPIRES_AT_KEY, EXPIRES_IN_KEY, MAX_EXPIRES_IN_SECONDS, expires_in_seconds, stamp_expires_at
from .payload import Item, timestamp_seconds

if TYPE_CHECKING:
    import redis

logger = logging.getLogger("jobsapp.expiry")

#: The daily counter's lifetime (Sidekiq's for its daily stats).
DAILY_TTL_SECONDS = 5 * 365 * 24 * 3600


def stamp(item: Item, *, scheduled_at: float | None, timestamp: float) -> None:
    """Give a job with ``expires_in`` its ``expires_at`` (the option's rule, ``jobsapp.options``)."""
    stamp_expires_at(item, scheduled_at=scheduled_at, timestamp=timestamp)


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


__all__ = [
    "DAILY_TTL_SECONDS",
    "EXPIRES_AT_KEY",
    "EXPIRES_IN_KEY",
    "MAX_EXPIRES_IN_SECONDS",
    "count",
    "expires_in_seconds",
    "is_expired",
    "stamp",
]
