"""Unique jobs: ``sidekiq_options(unique_for=seconds, unique_until="start" | "success")``.

As Sidekiq Enterprise's: a push whose class, queue, args and kwargs match a live lock is
refused, and ``perform_async`` (or ``client.push``) returns None; a bulk push returns None for
each refused job. The lock (keys.unique_lock, value = the jid) is taken by ``unique_push.lua``
in the same script as the push, immediate and scheduled alike, so two racing pushes can never
both enqueue. It lives ``unique_for`` seconds (counted from the run-at time for a scheduled job)
and is released by the worker, only if the same jid still holds it (``unique_release.lua``):

- ``unique_until="start"``: when the job starts, before ``perform``;
- ``unique_until="success"`` (the default): when it succeeds, or when it fails for good (dead,
  discarded, or ``NoRetryError``). Through retries the lock stays, until it expires.

The payload carries ``unique_digest`` (the lock's name) so a worker releases exactly the lock
the push took, whatever queue a retry uses. Jobs without ``unique_for`` never reach this module:
the client checks for the option and the processor for ``unique_digest``, nothing more.
A release that cannot reach Redis is logged; the lock then expires by itself.
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import TYPE_CHECKING

from . import keys, scripts
from .connection import CONNECTION_ERRORS
from .payload import Item, compact_json

if TYPE_CHECKING:
    import redis

logger = logging.getLogger("jobsapp.unique")

UNTIL_CHOICES = ("start", "success")
DIGEST_KEY = "unique_digest"


def lock_for(item: Item, *, scheduled_at: float | None, timestamp: float) -> tuple[str, int]:
    """Validate the options, add ``unique_digest`` to ``item``; (lock key, TTL in ms).

    ValueError on a bad ``unique_for`` or ``unique_until`` (nothing is written)."""
    unique_for = item.get("unique_for")
    if isinstance(unique_for, bool) or not isinstance(unique_for, (int, float)) or not 0 < unique_for < math.inf:
        raise ValueError(f"unique_for must be a positive number of seconds, not {unique_for!r}")
    until = item.get("unique_until", "success")
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
    return keys.unique_lock(digest), max(1, math.ceil((float(unique_for) + delay_seconds) * 1000))


def push_in(pipe: redis.client.Pipeline, lock: tuple[str, int], *, jid: str, data: bytes, queue: str, at: float | None) -> None:
    """Queue the take-lock-and-push script on ``pipe``; its reply is 1 (pushed) or 0 (refused)."""
    lock_key, ttl_ms = lock
    scripts.unique_push(pipe, lock_key=lock_key, ttl_ms=ttl_ms, jid=jid, data=data, queue=queue, at=at)


def release(client: redis.Redis, item: Item, *, moment: str) -> None:
    """Release the job's lock if it is released at ``moment`` ("start" or "success")."""
    digest = item.get(DIGEST_KEY)
    if not isinstance(digest, str) or item.get("unique_until", "success") != moment:
        return
    try:
        scripts.unique_release(client, digest=digest, jid=str(item.get("jid", "")))
    except CONNECTION_ERRORS as exc:  # the job goes on (or is done); the lock expires by itself
        logger.warning("jid=%s could not release its unique lock (%s); it expires in time", item.get("jid"), exc)
