"""Redis-only batches for untracked jobs: callbacks once a group of jobs is done, no database.

    batch = Batch(on_complete=ReportDone, on_success=PublishReport, description="nightly report")
    with batch.jobs():
        for part in parts:
            RenderPart.perform_async(part)     # pushed in the block (this thread or task): joins
    # ReportDone.perform(bid, {"total", "succeeded", "failed"}) runs once every job has run

Sidekiq Pro's semantics: ``on_complete`` fires once every job has run once, succeeded or failed
(a job being retried counts as run); ``on_success`` once every job's last run succeeded (it may
come later, when a retried job finally succeeds; never while a job sits in the dead set). Each
fires at most once, pushed by ``batch_update.lua`` in the same script that counts the job that
made it due, so racing workers on any host push it exactly once. Each job is counted once by its
jid (the ``succeeded`` and ``failed`` sets), however often its outcome is reported: a job that
finished just before its process died runs again and is not counted twice, so a callback never
fires before every job has run. While a ``jobs()`` block runs
the batch holds one extra pending unit, so no callback fires while jobs are still being added; a
block can be entered again later (or from several threads) to add more, until it has completed
(then ``jobs()`` raises ``BatchCompleted``: its jobs would join a batch whose callbacks fired).

The client adds ``"bid"`` to each job pushed in the block and counts it in the same pipeline
(MULTI) as the push; the "job ended" door (``jobsapp.ending``) calls ``job_finished`` when a job
with a ``bid`` succeeds, fails, expires or is buried. Jobs without a batch pay a ContextVar read
at push and a dict lookup at run. Keys (keys.batch, keys.batch_failed, keys.batch_succeeded)
live ``BATCH_TTL_SECONDS`` after their last update until the batch completes. Then the succeeded
set (about 72 bytes per job) is deleted: once every job has run, a success of a jid that is not
in the failed set is a duplicate, so the set is not needed to count each job once. The hash and
the failed set stay ``BATCH_TTL_SECONDS`` after each update while a job's last run failed (a
retry may still succeed and fire ``on_success``), and ``BATCH_LINGER_SECONDS`` once none has:
a duplicate report in that day is recognised and changes nothing; one arriving later finds no
batch and changes nothing either (``batch_update.lua`` answers -1). For jobs tracked in the database,
``Task.objects.launch(on_complete=..., on_success=...)`` is the same idea with progress and
events.

A job's end reaches its batch through the door's table (``jobsapp.ending``'s ``batches`` row:
``job_finished``), whoever ended it: a worker, the sweeper, an operator's delete or kill. In a
worker's processor threads with reliable fetch (``route_successes``), a success is not sent from
the job's thread: it is handed to the process's acker, which counts the successes of its batch
in one ``batch_update.lua`` call per batch (``count_successes``), sent before the ack of those
jobs. A job whose ack reached Redis was therefore counted; a process that dies first leaves the
job in flight, and its re-run counts it (once, by jid). A failure is counted at once, as before:
its filing (retry, dead) takes the job out of flight itself. The callbacks fire in the call that
counts the last job, as before, a few milliseconds later (the acker's next round). The callback
queues of a batch are read once per process (``_callback_queues``): they never change. A callback
class declared with a priority (``sidekiq_options(priority=N)``, ``jobsapp.priority``) is pushed
with it, to its queue's priority ZSET: the priority is stored in the batch's hash with its queue.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import keys, priority, registry, scripts
from .connection import CONNECTION_ERRORS, as_text, get_redis, unavailable
from .errors import JobsError
from .payload import new_jid, now
from .registry import JobClass, job_template

if TYPE_CHECKING:
    import redis

logger = logging.getLogger("jobsapp.batch")

BATCH_KEY = "bid"
#: How long a batch's keys live after their last update, until it completes without failures.
BATCH_TTL_SECONDS = 30 * 24 * 3600
#: How long a batch's hash lives once every job has run and none's last run failed: a duplicate
#: report within it is recognised; the batch's page and ``status()`` show it until then.
BATCH_LINGER_SECONDS = 24 * 3600


class BatchCompleted(JobsError):
    """``Batch.jobs()`` entered again after every job of the batch had run (its callbacks may
    have fired), or after its keys expired. Nothing was added; start a new ``Batch``."""


_current: ContextVar[str | None] = ContextVar("jobsapp.batch", default=None)


def current() -> str | None:
    """The id of the batch whose ``jobs()`` block is running in this thread or task, if any."""
    return _current.get()


def _callback(job_class: type[JobClass] | None, what: str) -> tuple[str, str, str]:
    """(wire name, queue, priority) of a callback class: its own queue, else
    ``JOBSAPP["DEFAULT_QUEUE"]`` as of the ``Batch(...)`` call, and its declared priority
    (``sidekiq_options(priority=N)``; '' for none), stored in the batch's hash, which
    ``batch_update.lua`` pushes from."""
    if job_class is None:
        return "", "", ""
    if not registry.is_registered_class(job_class):
        raise TypeError(f"{what} must be a Job class, not {job_class!r}")
    template = job_template(job_class)
    level = priority.of_item(template.options)
    return template.wire_name, template.queue, "" if level is None else str(level)


class Batch:
    """A group of jobs with callbacks; see the module header."""

    def __init__(
        self, *, on_complete: type[JobClass] | None = None, on_success: type[JobClass] | None = None, description: str = ""
    ) -> None:
        self.bid = os.urandom(8).hex()
        self.on_complete = _callback(on_complete, "on_complete")
        self.on_success = _callback(on_success, "on_success")
        self.description = description
        self._created = False

    @contextmanager
    def jobs(self) -> Iterator[Batch]:
        """Jobs pushed in this block join the batch; its callbacks may fire once the block ends."""
        connection = get_redis()
        fields: dict[str, str] = {}
        if not self._created:
            fields.update(
                {
                    "description": self.description,
                    "created_at": repr(now()),
                    "on_complete": self.on_complete[0],
                    "on_complete_queue": self.on_complete[1],
                    "on_complete_priority": self.on_complete[2],
                    "on_success": self.on_success[0],
                    "on_success_queue": self.on_success[1],
                    "on_success_priority": self.on_success[2],
                }
            )
        pipe = connection.pipeline(transaction=True)
        pipe.hmget(keys.batch(self.bid), ["completed_at", "created_at"])
        if fields:
            pipe.hset(keys.batch(self.bid), mapping={key: value for key, value in fields.items()})
            pipe.zadd(keys.BATCHES, {self.bid: float(fields["created_at"])})  # the dashboard's list (api.BatchSet)
            pipe.zremrangebyscore(keys.BATCHES, "-inf", float(fields["created_at"]) - BATCH_TTL_SECONDS)
        pipe.hsetnx(keys.batch(self.bid), "total", 0)
        pipe.hsetnx(keys.batch(self.bid), "succeeded", 0)
        pipe.hincrby(keys.batch(self.bid), "pending", 1)  # this block's own unit, until it ends
        pipe.expire(keys.batch(self.bid), BATCH_TTL_SECONDS)
        try:
            (completed_at, created_at), *_ = pipe.execute()
            if completed_at is not None or (self._created and created_at is None):
                self._give_back(connection, expired=completed_at is None)
                raise BatchCompleted(f"batch {self.bid} has completed or expired: no job can join it")
        except CONNECTION_ERRORS as exc:  # nothing was pushed in the block yet
            raise unavailable(exc) from exc
        self._created = True
        token = _current.set(self.bid)
        try:
            yield self
        finally:
            _current.reset(token)
            try:
                _update(connection, self.bid, "close", "")
            except CONNECTION_ERRORS as exc:  # the jobs pushed stay queued; this batch will wait
                raise unavailable(exc) from exc

    def _give_back(self, connection: redis.Redis, *, expired: bool) -> None:
        """Undo the pending unit a refused ``jobs()`` just took: a completed batch gets it back
        through the script (pending returns to 0; nothing fires again), an expired one's remains
        are deleted."""
        if expired:
            connection.delete(keys.batch(self.bid))
        else:
            _update(connection, self.bid, "close", "")

    def status(self) -> BatchStatus | None:
        return BatchStatus.read(self.bid)


@dataclass(frozen=True)
class BatchStatus:
    bid: str
    total: int
    pending: int
    succeeded: int
    failed: int
    complete: bool
    success: bool
    description: str

    @classmethod
    def read(cls, bid: str) -> BatchStatus | None:
        connection = get_redis()
        pipe = connection.pipeline(transaction=False)
        pipe.hgetall(keys.batch(bid))
        pipe.scard(keys.batch_failed(bid))
        fields, failed = pipe.execute()
        if not fields:
            return None
        values = {as_text(key): as_text(value) for key, value in fields.items()}
        pending = int(values.get("pending", 0))
        return cls(
            bid=bid,
            total=int(values.get("total", 0)),
            pending=pending,
            succeeded=int(values.get("succeeded", 0)),
            failed=int(failed),
            complete=pending <= 0,
            success=pending <= 0 and int(failed) == 0,
            description=values.get("description", ""),
        )


def count_pushed(pipe: redis.client.Pipeline, bid: str, jobs: int) -> None:
    """Queue the counting of ``jobs`` pushed into batch ``bid`` (before their push, same MULTI)."""
    pipe.hincrby(keys.batch(bid), "total", jobs)
    pipe.hincrby(keys.batch(bid), "pending", jobs)


def withdraw(client: redis.Redis, bid: str) -> None:
    """Uncount a job counted in the batch whose push was refused (a unique job's live lock)."""
    _update(client, bid, "withdrawn", "")


#: bid -> its callbacks' (on_complete queue, priority, on_success queue, priority), read once
#: per process (they never change).
_queues_of: dict[str, tuple[str, int | None, str, int | None]] = {}
#: The most batches whose callback queues a process remembers (then it forgets them all).
QUEUES_REMEMBERED = 10_000


def _level(value: bytes | str | None) -> int | None:
    """A callback's priority as stored in the batch's hash: None for none (or one another client
    garbled: the callback is then pushed as a plain job)."""
    try:
        return priority.of_item({priority.PRIORITY_KEY: int(value)}) if value else None
    except ValueError:  # not a number: a plain callback
        return None


def _callback_queues(client: redis.Redis, bid: str) -> tuple[str, int | None, str, int | None]:
    """A batch's callback queues ('' when none) and priorities (None when none), from its hash;
    remembered once the hash is seen (a batch's hash is written before any of its jobs is pushed)."""
    known = _queues_of.get(bid)
    if known is not None:
        return known
    complete, complete_priority, success, success_priority, created = client.hmget(
        keys.batch(bid), ["on_complete_queue", "on_complete_priority", "on_success_queue", "on_success_priority", "created_at"]
    )
    queues = (
        as_text(complete) if complete else "",
        _level(complete_priority),
        as_text(success) if success else "",
        _level(success_priority),
    )
    if created is not None:
        if len(_queues_of) >= QUEUES_REMEMBERED:
            _queues_of.clear()
        _queues_of[bid] = queues
    return queues


def _update(client: redis.Redis, bid: str, event: str, jid: str, *, more_jids: Sequence[str] = ()) -> scripts.BatchUpdate:
    complete_queue, complete_level, success_queue, success_level = _callback_queues(client, bid)
    return scripts.batch_update(
        client,
        bid=bid,
        event=event,
        jid=jid,
        complete_queue=complete_queue,
        complete_level=complete_level,
        success_queue=success_queue,
        success_level=success_level,
        complete_jid=new_jid(),
        success_jid=new_jid(),
        ttl_seconds=BATCH_TTL_SECONDS,
        linger_seconds=BATCH_LINGER_SECONDS,
        more_jids=more_jids,
    )


#: What a processor thread hands a success to instead of sending it: ``(client, bid, jid)``.
SuccessSink = Callable[["redis.Redis", str, str], None]

_routing = threading.local()


def route_successes(sink: SuccessSink | None) -> None:
    """In the calling thread from now on, ``job_finished`` hands a batch job's success to
    ``sink`` (the worker's acker, which counts it before it acknowledges the job) instead of
    counting it itself; None counts them in the thread again. A processor thread calls it once."""
    _routing.sink = sink


def count_successes(client: redis.Redis, successes: Sequence[tuple[str, str]]) -> None:
    """Count ``(bid, jid)`` successes, one ``batch_update.lua`` call per batch, in their order.
    Connection errors propagate: the caller (the acker) sends them again before any ack."""
    by_batch: dict[str, list[str]] = {}
    for bid, jid in successes:
        by_batch.setdefault(bid, []).append(jid)
    for bid, jids in by_batch.items():
        _update(client, bid, "succeeded", jids[0], more_jids=jids[1:])


def job_finished(client: redis.Redis, item: dict[str, Any], *, succeeded: bool) -> None:
    """Count a batch job's run (the "job ended" door calls it). In a thread that routes its
    successes (``route_successes``), a success goes to that sink. An update lost to a Redis
    outage is logged; that batch then waits for ever (its callbacks never fire): the jobs are
    unaffected."""
    bid = item.get(BATCH_KEY)
    if not isinstance(bid, str) or not bid:
        return
    if succeeded:
        sink = getattr(_routing, "sink", None)
        if sink is not None:
            sink(client, bid, str(item.get("jid", "")))
            return
    try:
        _update(client, bid, "succeeded" if succeeded else "failed", str(item.get("jid", "")))
    except CONNECTION_ERRORS as exc:  # the job's own fate is decided elsewhere; the batch waits
        logger.warning("batch %s: could not count jid=%s (%s)", bid, item.get("jid"), exc)
