"""Cancelling jobs: how a cancel request reaches the worker process that runs (or will run) the job.

The transport is Redis pub/sub, as asynq's ``asynq:cancel`` channel: ``request`` adds the jids to
``jobsapp:cancelled`` (a ZSET, jid -> when it was asked, trimmed to ``RETENTION_SECONDS`` and the
newest ``REMEMBERED_MAX``) and then
PUBLISHes them on ``jobsapp:cancel``. Every worker process listens on that channel in its own
thread (``jobsapp.worker.cancel_listener``, ``jobsapp.cancel-listener``) and hands each jid to its
processor, which interrupts the job if one of its threads runs it, and otherwise remembers the jid
so the job is cancelled the moment one of its threads starts it (a job fetched but not started, a
job put back by a shutdown and taken by another process).

Why pub/sub, and not the process's ``<identity>-signals`` list or another key read by a loop: the
signals list is read once per heartbeat (5 s), which is too slow for a Cancel button, and a job's
process is not known for certain when the cancel is asked (a job just fetched is not yet in any
``<identity>:work`` hash; the process of a job in a buffer may shut down and another one take it).
A broadcast reaches every process within a network round trip, whichever runs the job, and costs
a process nothing between cancels (a blocked read on its own connection, no polling). A message is
lost when a listener is disconnected at the moment it is published: the ZSET covers that, since
a listener reads the requests of the last ``RETENTION_SECONDS`` every time it (re)subscribes,
before it reads messages, so a cancel asked during an outage still stops its job once the
listener is back.

In cluster mode (``JOBSAPP["REDIS_CLUSTER"]``), PUBLISH is propagated to every node of the cluster
by Redis itself, so a listener subscribed on any node hears every message; the channel and the
ZSET carry the partition's hash tag as every other name (``jobsapp.keys``).

Runs in the caller's thread (``jobsapp.api.cancel``). No job is touched here: removing the waiting
copies is ``jobsapp.api.cancel``'s, stopping the running one the worker's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import keys
from .payload import compact_json, now, parse_json

if TYPE_CHECKING:
    import redis

#: How long a cancel request is remembered (the ZSET and each process's memory of it): a job taken
#: by a process within that time after its cancel is cancelled when it starts.
RETENTION_SECONDS = 24 * 3600.0
#: The most cancel requests a worker process remembers (the oldest are forgotten first): about
#: 13 MB per process at most, the jids of jobs it does not run (yet).
REMEMBERED_MAX = 50_000
#: The most jids in one message.
JIDS_PER_MESSAGE = 500


def remember(requests: dict[str, float], jid: str, *, asked_at: float) -> None:
    """Note in a worker's ``requests`` (jid -> when asked, on its monotonic clock, oldest first)
    that ``jid`` was cancelled, forgetting what is past ``RETENTION_SECONDS`` or beyond
    ``REMEMBERED_MAX``. The caller holds the lock that guards ``requests``."""
    requests.pop(jid, None)
    requests[jid] = asked_at
    while requests:  # oldest first
        oldest, oldest_at = next(iter(requests.items()))
        if oldest_at >= asked_at - RETENTION_SECONDS and len(requests) <= REMEMBERED_MAX:
            break
        del requests[oldest]


def request(client: redis.Redis, jids: Iterable[str], *, at: float | None = None) -> int:
    """Record a cancel request for each of ``jids`` and tell every worker process; returns how
    many jids were sent."""
    unique_jids = list(dict.fromkeys(jid for jid in jids if jid))
    if not unique_jids:
        return 0
    timestamp = now() if at is None else at
    pipe = client.pipeline(transaction=False)
    pipe.zadd(keys.CANCELLED, dict.fromkeys(unique_jids, timestamp))
    pipe.zremrangebyscore(keys.CANCELLED, "-inf", f"({timestamp - RETENTION_SECONDS!r}")
    pipe.zremrangebyrank(keys.CANCELLED, 0, -(REMEMBERED_MAX + 1))  # the newest REMEMBERED_MAX, as each process keeps
    pipe.execute()
    for start in range(0, len(unique_jids), JIDS_PER_MESSAGE):
        client.publish(keys.CANCEL_CHANNEL, encode(unique_jids[start : start + JIDS_PER_MESSAGE]))
    return len(unique_jids)


def encode(jids: list[str]) -> str:
    """One message: a JSON array of jids."""
    return compact_json(jids)


def decode(message: bytes | str) -> list[str]:
    """The jids of one message; none for a message that is not a JSON array of strings."""
    try:
        value = parse_json(message)
    except ValueError:  # not ours: nothing to cancel
        return []
    if not isinstance(value, list):
        return []
    return [jid for jid in value if isinstance(jid, str) and jid]


def recent(client: redis.Redis, *, since: float) -> dict[str, float]:
    """jid -> request time of the cancels asked since ``since`` (epoch seconds)."""
    members: list[tuple[bytes | str, float]] = client.zrangebyscore(keys.CANCELLED, since, "+inf", withscores=True)  # type: ignore[assignment]
    return {(member.decode("utf-8", "replace") if isinstance(member, bytes) else str(member)): float(score) for member, score in members}


__all__ = ["JIDS_PER_MESSAGE", "REMEMBERED_MAX", "RETENTION_SECONDS", "decode", "encode", "recent", "request"]
