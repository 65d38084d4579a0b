"""The one "job ended" door: every place that settles a job's fate calls ``finish`` once.

A job's life ends in many ways: it succeeded; it failed and went to the retry set, the dead set
or nowhere (``retry: false``, ``NoRetryError``, a ``discard``); it expired unrun; it stayed stuck
past its timeout's hard limit; its class is unknown or its class name hostile; its payload is
malformed; it killed its worker too often (poison); it was revoked before it started; an
operator deleted it, or killed it, while it waited (``jobsapp.api``: the dashboard and the
``jobs`` command act through it). Whoever files that fate (``processor``, ``recovery``, the
operators' API, the Celery ``revoke``) then calls ``finish(client, item, fate, ...)`` once the
filing succeeded, and the door tells each built-in feature the job carries, through one fixed
table of ``(payload key -> hook)`` (``HOOKS``):

- ``retain`` (results): the record's outcome, ``retrying`` or ``failed`` with the reason
  (``succeeded`` with the value is written by the run itself, ``Recorder.run``, before the door),
  written first so a batch callback that reads a member's record finds it;
- ``periodic``: the periodic entry's last outcome, for the dashboard;
- ``unique_digest``: the unique lock is released when the job is done for good (any fate but
  ``RETRIED``), whatever ``unique_until`` says (a "start" job that never started must not hold
  its lock until it expires); a retried job keeps it. The release is guarded by the jid, so a
  lock another push took since is never dropped;
- ``bid`` (batches): the job's run is counted, succeeded (``SUCCEEDED``, and ``EXPIRED`` as
  Sidekiq Pro counts it) or failed (everything else, a deleted job too, so its batch completes),
  once per jid (``batch_update.lua``).

Then server middleware hears it (``jobsapp.middleware``: tracking, tracing, users' own):
``on_retry`` for ``RETRIED``, ``on_dead`` with a ``DeadReason`` for every other fate but
``SUCCEEDED`` (a success is seen by the middleware's own ``call``). This door is the only caller
of ``middleware.notify``: a feature or a middleware never hears half of an ending.

A plain job that succeeded pays one dict lookup per row and no call. A feature that needs to
hear the end of its jobs adds a row to ``HOOKS`` and touches nothing else in the engine. The
door may be called twice for one jid (at-least-once delivery: a job re-run after a crash that
came between its outcome and its ack): every hook is idempotent per jid. The operators' paths
call it only when their own removal (``LREM``, ``ZREM``, ``api_kill.lua``) took the job, so two
operators deleting one job tell the door once.

A job put back on its queue unfinished (shutdown, a dead process's recovery, a full limiter, an
operator's "retry now" or "add to queue") has not ended: ``put_back`` records a retained job as
queued again and tells server middleware (``on_requeue``). The producing side's counterpart of
this door is ``jobsapp.options``.

Runs in the thread that settled the fate (a processor thread, an async lane thread, the
sweeper, the manager at shutdown, a web request or the ``jobs`` command acting through
``jobsapp.api``, the caller of ``revoke``). A hook that fails is logged and the next one runs:
the job's fate is already filed, and its bookkeeping never changes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from . import batch, periodic, registry, results, unique
from .middleware import notify, server_chain
from .outcomes import DeadReason, OutcomeKind, RequeueReason
from .payload import Item, now
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


#: The fates after which the job never runs again (an operator may still send a dead job back
#: to its queue: it is then put back, ``put_back``, and ends again).
FINAL_FATES = frozenset({Fate.SUCCEEDED, Fate.DEAD, Fate.DISCARDED, Fate.EXPIRED, Fate.REVOKED, Fate.DELETED})
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
_REASON_OF_FATE = {Fate.EXPIRED: DeadReason.EXPIRED, Fate.REVOKED: DeadReason.REVOKED, Fate.DELETED: DeadReason.DELETED}


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


#: A feature's hook: called with the Redis client, the job's item and how it ended.
Hook = Callable[[Any, Item, Ending], None]

#: (payload key, hook) for each built-in feature, in the order they are told. A feature adds a
#: row; the engine calls the hook of each key the item carries, and nothing for the others.
HOOKS: list[tuple[str, Hook]] = [
    (results.RETAIN_OPTION, _record_result),
    (periodic.PERIODIC_KEY, _record_periodic),
    (unique.DIGEST_KEY, _release_unique),
    (batch.BATCH_KEY, _settle_batch),
]


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
    for key, hook in HOOKS:
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
    limiter, an operator's move from a set to its queue): not an ending. A retained job's record
    says ``queued`` again, then server middleware hears ``on_requeue`` with ``reason`` (a
    ``RequeueReason``)."""
    if results.RETAIN_OPTION in item and "jid" in item:
        try:
            recorder.on_requeue(item)
        except Exception:  # the job is back in its queue whatever happens to its record
            logger.exception("jid=%s: recording the requeue failed", item.get("jid"))
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


__all__ = ["HOOKS", "DeadReason", "Ending", "Fate", "JobDeleted", "finish", "finish_outcome", "put_back"]
