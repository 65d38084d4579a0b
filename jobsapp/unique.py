"""Unique jobs: ``sidekiq_options(unique_for=seconds, unique_until="start" | "success")``.

As Sidekiq Enterprise's: a push whose class, queue, args and kwargs match a live lock is
refused, and ``perform_async`` (or ``client.push``) returns None; a bulk push returns None for
each refused job. The lock (keys.unique_lock, value = the jid) is taken by ``unique_push.lua``
in the same script as the push, immediate and scheduled alike, so two racing pushes can never
both enqueue. It lives ``unique_for`` seconds (counted from the run-at time for a scheduled job)
and is released by the worker, only if the same jid still holds it (``unique_release.lua``):

- ``unique_until="start"``: when the job starts, before ``perform`` (the door's ``start``
  moment: ``jobsapp.ending``'s ``unique`` row);
- ``unique_until="success"`` (the default): when it succeeds. Through retries the lock stays,
  until it expires;
- either way, when the job is done for good without that (dead, discarded, ``NoRetryError``,
  expired, revoked, an unknown class, poison): the "job ended" door (``jobsapp.ending``) calls
  ``release`` for every fate but a retry.

The payload carries ``unique_digest`` (the lock's name) so a worker releases exactly the lock
the push took, whatever queue a retry uses. Jobs without ``unique_for`` never reach this module:
the client checks for the option and the door's table for ``unique_digest``, nothing more.
A release that cannot reach Redis is logged; the lock then expires by itself.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from . import scripts
from .connection import CONNECTION_ERRORS
from .options import DIGEST_KEY, UNTIL_CHOICES, unique_lock
from .payload import Item

if TYPE_CHECKING:
    import redis

logger = logging.getLogger("jobsapp.unique")


def lock_for(item: Item, *, scheduled_at: float | None, timestamp: float) -> tuple[str, int]:
    """Validate the options, add ``unique_digest`` to ``item``; (lock key, TTL in ms) (the
    option's rule, ``jobsapp.options``). ValueError on a bad option (nothing is written)."""
    return unique_lock(item, scheduled_at=scheduled_at, timestamp=timestamp)


def push_in(pipe: redis.client.Pipeline, lock: tuple[str, int], *, jid: str, data: bytes, queue: str, at: float | None) -> None:
    """Queue the take-lock-and-push script on ``pipe``; its reply is ``scripts.unique_push_reply``'s."""
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


__all__ = ["DIGEST_KEY", "UNTIL_CHOICES", "lock_for", "push_in", "release"]
