"""The door through which every built-in feature hears a job: one table, read at each moment.

A feature of the engine (results, periodic, unique, batches, expiry, timeouts, limits) is a row
of ``FEATURES``: the payload key that says a job uses it (None: every job) and its hook at each
moment of the job's life. ``TABLE`` holds each moment's ``(key, hook)`` rows, and the hooks of the
rows whose key the job carries are called, in table order:

- ``admit`` (``hook(client, item)``), when a job is fetched, before its class is looked up: a
  fate that ends it unrun (expiry: past its ``expires_at``, logged and counted, ``EXPIRED``);
- ``start`` (``hook(client, item)``), just before it runs: unique releases a
  ``unique_until="start"`` lock, timeouts checks the ``timeout`` (a ValueError parks the job);
- ``run(job, item, call)``, around the run with its server middleware: results writes the record
  ``running``, then ``succeeded`` with the value;
- ``guard`` (``hook(running, call)``, a ``Run``), around ``perform`` inside the middleware:
  timeouts and cancels (every job: a job with a ``timeout`` under the worker's watchdog guard, any
  other noted where a cancel finds its thread, which costs it no lock; a cancel raises
  ``JobCancelled``; for an async job the lane cancels its coroutine), then
  limits (the queue's limit, and the holder that gives back the concurrent slots a run still
  holds when it ends: every job, since ``perform`` may take a slot with no payload key saying so);
- ``finish(client, item, fate, ...)``, once its life (or this run of it) ended;
- ``put_back(item, reason=...)``, when it went back to its queue unfinished.

The processor walks ``TABLE.admit``, ``TABLE.start`` and ``TABLE.guard`` itself, in the job's hot
path: a plain job pays one dict lookup per row and no call (the cancel and limits guards
excepted: they hear every job); the other moments are the functions above. A new feature is a payload
key, its rule on the producing side (``jobsapp.options``, this door's counterpart at push) and a
row here; the processor, the retry policy, recovery and the operators' API do not change.

``finish``: a job's life ends in many ways: it succeeded; it failed and went to the retry set,
the dead set or nowhere (``retry: false``, ``NoRetryError``, a ``discard``); it expired unrun; it
stayed stuck past its timeout's hard limit; its class is unknown or its class name hostile; its
payload is malformed; it killed its worker too often (poison); it was revoked before it started;
an operator deleted it, or killed it, while it waited; it was cancelled (``jobsapp.api.cancel``:
interrupted while it ran, or removed while it waited; ``CANCELLED``, never retried). Whoever
files that fate (``processor``, ``recovery``, the operators' API ``jobsapp.api`` with the
dashboard and the ``jobs`` command, the Celery ``revoke``) calls ``finish`` once the filing
succeeded, and the ``end`` hooks run:

- results (``retain``): the record's outcome, ``retrying`` or ``failed`` with the reason, first,
  so a batch callback that reads a member's record finds it;
- periodic: the periodic entry's last outcome, for the dashboard;
- unique (``unique_digest``): the lock is released once the job is done for good (any fate but
  ``RETRIED``), whatever ``unique_until`` says; the release is guarded by the jid, so a lock
  another push took since is never dropped;
- batches (``bid``): the run is counted, succeeded (``SUCCEEDED``, and ``EXPIRED`` as Sidekiq Pro
  counts it) or failed (everything else, a deleted job too, so its batch completes), once per
  jid (``batch_update.lua``).

Then server middleware hears it (``jobsapp.middleware``: tracking, tracing, users' own):
``on_retry`` for ``RETRIED``, ``on_dead`` with a ``DeadReason`` for every other fate but
``SUCCEEDED`` (a success is seen by each middleware's own ``call``); ``put_back`` tells
``on_requeue``. This door is the only caller of ``middleware.notify`` for a job: a feature or a
middleware never hears half of an ending.

``finish`` may be called twice for one jid (at-least-once delivery: a job re-run after a crash
that came between its outcome and its ack): every hook is idempotent per jid. The operators'
paths call it only when their own removal (``LREM``, ``ZREM``, ``api_kill.lua``) took the job.

Runs in the thread that handles the job at that moment (a processor thread, an async lane
thread, the sweeper, the manager at shutdown, a web request or the ``jobs`` command acting
through ``jobsapp.api``, the caller of ``revoke``). An ``end`` hook that fails is logged and the
next one runs: the job's fate is already filed, and its bookkeeping never changes it.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from . import batch, expiry, options, periodic, registry, results, unique
from .connection import CONNECTION_ERRORS
from .errors import JobCancelled
from .middleware import notify, server_chain
from .outcomes import DeadReason, OutcomeKind, RequeueReason
from .payload import Item, now, timestamp_seconds
from .result_writer import recorder

if TYPE_CHECKING:
    import redis

    from .job import Job
    from .worker.retry import Outcome

logger = logging.getLogger("jobsapp.ending")


class Fate(StrEnum):
    """How a job's life (or this run of it) ended."""

    SUCCEEDED = "succeeded"  # perform returned
    RETRIED = "retried"  # failed; in the retry set, it runs again
    DEAD = "dead"  # in the dead set (retries exhausted, killed, unknown class, malformed, poison, hard limit)
    DISCARDED = "discarded"  # failed for good, in no set (retry: false, NoRetryError, "discard", dead: false)
    EXPIRED = "expired"  # fetched past its expires_at: dropped, never run
    REVOKED = "revoked"  # removed before it started (Celery's revoke)
    DELETED = "deleted"  # an operator deleted it while it waited: from its queue (or cleared it), the schedule or the retry set
    CANCELLED = "cancelled"  # cancelled (jobsapp.api.cancel): interrupted while it ran, or removed while it waited


#: The fates after which the job never runs again (an operator may still send a dead job back
#: to its queue: it is then put back, ``put_back``, and ends again).
FINAL_FATES = frozenset({Fate.SUCCEEDED, Fate.DEAD, Fate.DISCARDED, Fate.EXPIRED, Fate.REVOKED, Fate.DELETED, Fate.CANCELLED})
#: The fates a batch counts as a success (Sidekiq Pro counts an expired job as one).
BATCH_SUCCESSES = frozenset({Fate.SUCCEEDED, Fate.EXPIRED})

_FATE_OF_OUTCOME = {OutcomeKind.RETRY: Fate.RETRIED, OutcomeKind.DEAD: Fate.DEAD, OutcomeKind.DISCARDED: Fate.DISCARDED}


def fate_of(kind: OutcomeKind) -> Fate | None:
    """The fate a retry policy's outcome settled; None for ``LOST`` (another process filed it:
    this call settled nothing)."""
    return _FATE_OF_OUTCOME.get(kind)


class JobExpired(Exception):
    """The job was fetched past its ``expires_at``: dropped, never run (reported to hooks, never raised)."""


class JobRevoked(Exception):
    """The job was removed before it started (reported to hooks, never raised)."""


class JobDeleted(Exception):
    """An operator deleted the job while it waited (reported to hooks, never raised)."""


class JobKilled(Exception):
    """An operator sent the job to the dead set while it waited (reported to hooks, never raised)."""


#: The reason ``on_dead`` hears for a fate that has one of its own, when the caller gave none.
_REASON_OF_FATE = {
    Fate.EXPIRED: DeadReason.EXPIRED,
    Fate.REVOKED: DeadReason.REVOKED,
    Fate.DELETED: DeadReason.DELETED,
    Fate.CANCELLED: DeadReason.CANCELLED,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Ending:
    """What the hooks are told: the fate, and what the fate's filing knows."""

    fate: Fate
    error: BaseException | None = None  # what failed it (None on success)
    reason: str = ""  # a DeadReason for every fate but SUCCEEDED and RETRIED
    run_at: float | None = None  # RETRIED: the next attempt
    retry_limit: int = 0  # RETRIED: how many retries the job allows
    finished_at: float = 0.0

    def failure(self) -> BaseException | None:
        """The error to report: the one given, else one naming a fate that had none."""
        if self.error is not None or self.fate is Fate.SUCCEEDED:
            return self.error
        if self.fate is Fate.EXPIRED:
            return JobExpired("the job expired before it started")
        if self.fate is Fate.REVOKED:
            return JobRevoked("the job was revoked before it started")
        if self.fate is Fate.DELETED:
            return JobDeleted("the job was deleted by an operator before it ran")
        if self.fate is Fate.CANCELLED:
            return JobCancelled("the job was cancelled before it ran")
        if self.reason == DeadReason.OPERATOR_KILLED:
            return JobKilled("an operator sent the job to the dead set")
        return None


def _record_result(client: redis.Redis, item: Item, ending: Ending) -> None:
    if ending.fate is Fate.SUCCEEDED:
        return  # written by the run itself (``Recorder.run``), which holds the value
    if ending.fate is Fate.RETRIED:
        retry_count = item.get("retry_count")
        recorder.on_retry(
            item,
            ending.error or Exception("unknown"),
            retry_count=retry_count if isinstance(retry_count, int) else 0,
            run_at=ending.run_at if ending.run_at is not None else ending.finished_at,
        )
    else:
        recorder.on_dead(item, ending.error, reason=ending.reason or ending.fate)  # expired, revoked: no error to show


def _record_periodic(client: redis.Redis, item: Item, ending: Ending) -> None:
    periodic.record_outcome(client, item, error=ending.failure(), finished_at=ending.finished_at)


def _release_unique(client: redis.Redis, item: Item, ending: Ending) -> None:
    if ending.fate in FINAL_FATES:  # a retried job keeps its lock through its retries
        unique.release(client, item, moment=str(item.get("unique_until", "success")))


def _settle_batch(client: redis.Redis, item: Item, ending: Ending) -> None:
    batch.job_finished(client, item, succeeded=ending.fate in BATCH_SUCCESSES)


def _record_requeue(item: Item) -> None:
    if "jid" in item:
        try:
            recorder.on_requeue(item)
        except Exception:  # the job is back in its queue whatever happens to its record
            logger.exception("jid=%s: recording the requeue failed", item.get("jid"))


def _run_recorded(job: Job, item: Item, call: Call) -> Any:
    return recorder.run(job, item, call)  # ``running`` before, ``succeeded`` and the value after


def _release_unique_at_start(client: redis.Redis, item: Item) -> None:
    unique.release(client, item, moment="start")  # only a ``unique_until="start"`` lock


def _drop_expired(client: redis.Redis, item: Item) -> Fate | None:
    timestamp = now()
    if not expiry.is_expired(item, timestamp):
        return None
    expires_at = timestamp_seconds(item.get(expiry.EXPIRES_AT_KEY)) or timestamp
    expiry.logger.warning(
        "class=%s jid=%s queue=%s expired %.1f s ago (expires_in=%s): dropped, not run",
        str(item.get("class"))[:200],
        item.get("jid"),
        item.get("queue"),
        timestamp - expires_at,
        item.get(expiry.EXPIRES_IN_KEY),
    )
    try:
        expiry.count(client, today=dt.datetime.fromtimestamp(timestamp, dt.UTC).date())
    except CONNECTION_ERRORS as exc:  # the job is dropped all the same; only the count is lost
        expiry.logger.warning("jid=%s expired job not counted (%s)", item.get("jid"), exc)
    return Fate.EXPIRED


def _check_timeout(client: redis.Redis, item: Item) -> None:
    options.timeout_seconds(item)  # ValueError on a garbled timeout: parked, never run without its limit


def _within_timeout(run: Run, call: Call) -> Call:
    """Every job's ``perform`` is interruptible by a cancel (``jobsapp.api.cancel``): a job with a
    ``timeout`` under its guard, any other where the worker finds its thread when a cancel comes."""
    if options.TIMEOUT_KEY not in run.item:  # most jobs: no guard, no lock
        return run.cancellable(call)
    return run.within_timeout(options.timeout_seconds(run.item), call)


def _within_limits(run: Run, call: Call) -> Call:
    return run.within_limits(call)


#: One call of a job's run: the server chain, or ``perform`` inside it.
Call = Callable[[], Any]
#: A feature's hook at the end: called with the Redis client, the job's item and how it ended.
Hook = Callable[[Any, Item, Ending], None]


class Run(Protocol):
    """What the guards around ``perform`` use of the worker running the job (the processor's
    per-job record): the job, and the worker's own machinery for a timeout (the watchdog
    thread, or the async lane's cancel) and for limits (the process's queue limits, and the
    holder that gives back the concurrent slots a run still holds when it ends)."""

    item: Item

    def within_timeout(self, seconds: float | None, call: Call) -> Call:
        """``call`` failing with ``JobTimeout`` past ``seconds`` (None: no timeout), and with
        ``JobCancelled`` when the job is cancelled."""
        ...

    def cancellable(self, call: Call) -> Call:
        """``call`` failing with ``JobCancelled`` when the job is cancelled (no timeout)."""
        ...

    def within_limits(self, call: Call) -> Call:
        """``call`` inside its queue's limit, as the holder of the limiter slots it takes."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Feature:
    """One built-in feature's row: the payload key that says a job uses it (None: every job),
    and the hook it has at each moment of the job's life (None: it does not listen then)."""

    name: str
    key: str | None
    #: when the job is fetched, before its class is looked up: a fate ends it unrun (acked)
    admit: Callable[[Any, Item], Fate | None] | None = None
    #: once the job is admitted, just before its run (a ValueError parks it as malformed)
    start: Callable[[Any, Item], None] | None = None
    #: around the whole run, server middleware included: ``around(job, item, call)`` calls ``call``
    around: Callable[[Job, Item, Call], Any] | None = None
    #: around ``perform`` alone, inside the middleware: the guarded call
    guard: Callable[[Run, Call], Call] | None = None
    #: when its life (or this run of it) ended: ``finish``
    end: Hook | None = None
    #: when it went back to its queue unfinished: ``put_back``
    put_back: Callable[[Item], None] | None = None


#: The one table through which a built-in feature hears a job, in the order they are told (see
#: the module's docstring). A feature adds a row; the engine calls the hooks of the rows whose
#: key the job carries, and nothing for the others.
FEATURES: tuple[Feature, ...] = (
    Feature(name="results", key=results.RETAIN_OPTION, around=_run_recorded, end=_record_result, put_back=_record_requeue),
    Feature(name="periodic", key=periodic.PERIODIC_KEY, end=_record_periodic),
    Feature(name="unique", key=unique.DIGEST_KEY, start=_release_unique_at_start, end=_release_unique),
    Feature(name="batches", key=batch.BATCH_KEY, end=_settle_batch),
    Feature(name="expiry", key=expiry.EXPIRES_AT_KEY, admit=_drop_expired),
    Feature(name="timeouts", key=options.TIMEOUT_KEY, start=_check_timeout),
    # every job: its timeout's guard, or a note of its thread, so that a cancel can interrupt it
    Feature(name="cancel", key=None, guard=_within_timeout),
    # every job: ``perform`` may take a limiter's slot with no payload key saying so
    Feature(name="limits", key=None, guard=_within_limits),
)


@dataclass(frozen=True, slots=True)
class Table:
    """``FEATURES`` indexed by moment: each moment's ``(key, hook)`` rows, in table order, read
    once at import (a job then pays a tuple walk, no attribute lookup per row)."""

    admit: tuple[tuple[str, Callable[[Any, Item], Fate | None]], ...]
    start: tuple[tuple[str, Callable[[Any, Item], None]], ...]
    around: tuple[tuple[str, Callable[[Job, Item, Call], Any]], ...]
    guard: tuple[tuple[str | None, Callable[[Run, Call], Call]], ...]
    end: tuple[tuple[str, Hook], ...]
    put_back: tuple[tuple[str, Callable[[Item], None]], ...]

    @classmethod
    def of(cls, features: tuple[Feature, ...]) -> Table:
        """The table's rows by moment. Only a guard may hear every job (``key=None``): every
        other moment costs a keyless row a call per job."""
        moments: dict[str, list[Any]] = {name: [] for name in cls.__slots__}
        for row in features:
            for moment, rows in moments.items():
                hook = getattr(row, moment)
                if hook is None:
                    continue
                if row.key is None and moment != "guard":
                    raise ValueError(f"feature {row.name!r}: only its guard may hear every job, not its {moment}")
                rows.append((row.key, hook))
        built: dict[str, Any] = {moment: tuple(rows) for moment, rows in moments.items()}
        return cls(**built)


TABLE = Table.of(FEATURES)
#: Any keyed row's payload key as it appears in a job's JSON (quoted), for ``may_hear``.
_ANY_KEY = re.compile(b"|".join(re.escape(f'"{row.key}"'.encode()) for row in FEATURES if row.key is not None))


def may_hear(raw: bytes) -> bool:
    """Whether ``finish`` could tell anyone of the job stored as ``raw``: server middleware is
    configured, or its bytes name a feature's payload key. A test of bytes before any decoding,
    for an operator's clear of many jobs (a false yes only costs the decoding)."""
    return bool(server_chain().instances()) or _ANY_KEY.search(raw) is not None


def run(job: Job, item: Item, call: Call) -> Any:
    """``call()`` (the server chain around ``perform``) inside the ``around`` hooks of the
    features the job carries (results: its record ``running``, then ``succeeded`` with the value)."""
    for key, hook in TABLE.around:
        if key in item:
            call = partial(hook, job, item, call)
    return call()


def finish(
    client: redis.Redis,
    item: Item,
    fate: Fate,
    *,
    error: BaseException | None = None,
    reason: str = "",
    run_at: float | None = None,
    retry_limit: int = 0,
    job_class: type[Job] | None = None,
) -> None:
    """Tell every feature the job carries, then server middleware, that its run ended with
    ``fate``. ``job_class`` is what middleware hears (looked up by the job's wire name when not
    given: an operator's path has none). Never raises for a hook's failure (logged; the job's
    fate is already filed)."""
    ending: Ending | None = None
    for key, hook in TABLE.end:
        if key not in item:
            continue
        if ending is None:
            ending = _ending(fate, error, reason, run_at, retry_limit)
        try:
            hook(client, item, ending)
        except Exception:  # the job is already filed (acked, retried or dead); only this feature's note is lost
            logger.exception("jid=%s: the %r hook failed at the end of the job (%s)", item.get("jid"), key, fate)
    if fate is Fate.SUCCEEDED or not server_chain().instances():
        return  # a success is seen by each middleware's own ``call``
    _tell_middleware(item, ending or _ending(fate, error, reason, run_at, retry_limit), job_class)


def _ending(fate: Fate, error: BaseException | None, reason: str, run_at: float | None, retry_limit: int) -> Ending:
    reason = reason or _REASON_OF_FATE.get(fate, "")
    return Ending(fate=fate, error=error, reason=reason, run_at=run_at, retry_limit=retry_limit, finished_at=now())


def _tell_middleware(item: Item, ending: Ending, job_class: type[Job] | None) -> None:
    """``on_retry`` or ``on_dead`` on every server middleware (a hook that raises is logged)."""
    if job_class is None:
        name = item.get("class")
        job_class = registry.lookup(name) if isinstance(name, str) and registry.is_registered(name) else None
    if ending.fate is Fate.RETRIED:
        retry_count = item.get("retry_count")
        notify(
            "on_retry",
            job_class,
            item,
            ending.error or Exception("unknown"),
            retry_count=retry_count if isinstance(retry_count, int) else 0,
            retry_limit=ending.retry_limit,
            run_at=ending.run_at if ending.run_at is not None else ending.finished_at,
        )
    else:
        notify("on_dead", job_class, item, ending.error, reason=ending.reason or str(ending.fate))


def put_back(item: Item, *, reason: RequeueReason) -> None:
    """The job went back to its queue unfinished (shutdown, a dead process's recovery, a full
    limiter, an operator's move from a set to its queue): not an ending. The features it carries
    hear it (a retained job's record says ``queued`` again), then server middleware hears
    ``on_requeue`` with ``reason`` (a ``RequeueReason``)."""
    for key, hook in TABLE.put_back:
        if key in item:
            hook(item)
    notify("on_requeue", item, reason=reason)


def finish_outcome(
    client: redis.Redis, item: Item, outcome: Outcome, *, error: BaseException | None, job_class: type[Job] | None = None
) -> None:
    """``finish`` for what a retry policy filed (the item as filed, with its error fields, when
    it has one); nothing for ``LOST`` (another process filed it: this call settled nothing)."""
    fate = fate_of(outcome.kind)
    if fate is not None:
        filed = outcome.item if outcome.item is not None else item
        reason, run_at, retry_limit = outcome.reason or "", outcome.run_at, outcome.retry_limit
        finish(client, filed, fate, error=error, reason=reason, run_at=run_at, retry_limit=retry_limit, job_class=job_class)


__all__ = ["FEATURES", "TABLE", "DeadReason", "Ending", "Fate", "Feature", "JobDeleted", "Run", "Table"]
__all__ += ["finish", "finish_outcome", "may_hear", "put_back", "run"]
