"""``BatchSet``: the Redis-only batches of ``jobsapp.batch``, for the dashboard and the CLI.

A batch is a hash (``keys.batch``: total, pending, succeeded, description, created_at, each
callback's class and queue and whether it fired) and the set of the jids whose last run failed
(``keys.batch_failed``); ``keys.BATCHES`` indexes them by creation time (a ZSET the batch
writes when it is created). ``page`` reads one page of the index and the hashes in one
pipeline, dropping from the index the batches whose keys have expired. ``get`` reads one batch
with its failed jids (up to ``FAILED_JIDS_SHOWN``) and looks for its pending jobs: the running
ones, then the retry and scheduled sets (ZSCAN MATCH on the batch id, filtered on the server),
then the queues (LRANGE in chunks, a byte search before any decoding), examining at most
``PENDING_SCAN_BUDGET`` entries, so a page over a million queued jobs answers in a fraction of
a second and says whether it looked everywhere. A batch keeps no list of its members' jids:
a pending job is found where it is, as ``find_job`` finds a job.

Every number read from Redis is taken only when it is a whole number (a hash another client
broke reads as 0). Redis connection errors raise ``RedisUnavailable``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import redis

from .. import keys
from ..connection import as_text, get_redis
from .guard import translate_errors
from .processes import WorkSet
from .queues import SCAN_CHUNK, Queue
from .records import JobRecord, Page, clamp_page

#: Failed jids a batch's page lists (SSCAN: the rest are counted, not listed).
FAILED_JIDS_SHOWN = 1000
#: Entries of queues, retry and scheduled sets examined looking for a batch's pending jobs.
PENDING_SCAN_BUDGET = 10_000
#: Pending jobs a batch's page lists.
PENDING_JOBS_SHOWN = 100


def _whole(value: object) -> int:
    text = as_text(value) if value is not None else ""
    try:
        number = float(text)
    except ValueError:
        return 0
    return int(number) if math.isfinite(number) and abs(number) < 2**53 else 0


def _epoch(value: object) -> float | None:
    text = as_text(value) if value is not None else ""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) and 0 < number < 253_402_300_799 else None


@dataclass(frozen=True)
class Callback:
    """One callback of a batch: ``kind`` "complete" or "success", its class and queue, and
    ``state``: "fired" (pushed), "waiting" (jobs have not all run yet) or "held by failures"
    (on_success of a complete batch some of whose jobs' last run failed: it fires if they all
    succeed on a retry, never while one sits in the dead set)."""

    kind: str
    job_class: str
    queue: str
    fired: bool
    state: str


@dataclass(frozen=True)
class PendingJob:
    """A job of the batch that has not run yet, where it was found: ``where`` is "running",
    "retry", "scheduled" or "queue"; ``name`` the process identity, set or queue name."""

    where: str
    name: str
    record: JobRecord


@dataclass(frozen=True)
class BatchSummary:
    """One batch, as its hash and failed set say."""

    bid: str
    description: str
    created_at: float | None
    total: int
    pending: int
    succeeded: int
    failed: int
    callbacks: list[Callback]

    @property
    def complete(self) -> bool:
        """Every job has run once (on_complete's condition)."""
        return self.pending <= 0

    @property
    def success(self) -> bool:
        """Complete and no job's last run failed (on_success's condition)."""
        return self.complete and self.failed == 0

    @property
    def status(self) -> str:
        return "success" if self.success else "complete" if self.complete else "pending"


@dataclass(frozen=True)
class BatchDetail(BatchSummary):
    """A batch with the jids behind its counts."""

    failed_jids: list[str] = field(default_factory=list)
    pending_jobs: list[PendingJob] = field(default_factory=list)
    #: False when the pending jobs were looked for in part only (the scan budget ran out).
    searched_everywhere: bool = True


def _summary(bid: str, fields: dict[str, str], failed: int) -> BatchSummary:
    pending = _whole(fields.get("pending"))
    callbacks = []
    for kind in ("complete", "success"):
        job_class = fields.get(f"on_{kind}", "")
        if not job_class:
            continue
        fired = bool(fields.get(f"{kind}_fired"))
        state = "fired" if fired else "held by failures" if kind == "success" and pending <= 0 and failed else "waiting"
        callbacks.append(Callback(kind, job_class, fields.get(f"on_{kind}_queue", ""), fired, state))
    return BatchSummary(
        bid=bid,
        description=fields.get("description", ""),
        created_at=_epoch(fields.get("created_at")),
        total=_whole(fields.get("total")),
        pending=pending,
        succeeded=_whole(fields.get("succeeded")),
        failed=failed,
        callbacks=callbacks,
    )


def _pending_jobs(bid: str, *, budget: int, shown: int) -> tuple[list[PendingJob], bool]:
    """Jobs of ``bid`` found running, in retry, scheduled or queued; whether the search was whole."""
    needle = f'"bid":"{bid}"'
    found: list[PendingJob] = []
    for work in WorkSet.all():
        if work.record.get("bid") == bid:
            found.append(PendingJob("running", work.identity, work.record))
    connection = get_redis()
    examined = 0
    for where, key in (("retry", keys.RETRY), ("scheduled", keys.SCHEDULE)):
        cursor = 0
        while True:
            cursor, members = connection.zscan(key, cursor, match=f"*{needle}*", count=SCAN_CHUNK)
            examined += SCAN_CHUNK
            found += [PendingJob(where, key, JobRecord(member)) for member, _ in members if isinstance(member, (bytes, str))]
            if cursor == 0:
                break
            if examined >= budget or len(found) >= shown:
                return found[:shown], False
    raw_needle = needle.encode()
    for queue in Queue.all():
        start = 0
        while True:
            chunk = connection.lrange(keys.queue(queue.name), start, start + SCAN_CHUNK - 1)
            examined += len(chunk)
            found += [PendingJob("queue", queue.name, JobRecord(raw)) for raw in chunk if raw_needle in raw]
            if len(chunk) < SCAN_CHUNK:
                break
            start += SCAN_CHUNK
            if examined >= budget or len(found) >= shown:
                return found[:shown], False
    return found[:shown], len(found) <= shown


class BatchSet:
    """Every batch still in Redis, newest first."""

    @staticmethod
    @translate_errors
    def size() -> int:
        return int(get_redis().zcard(keys.BATCHES))

    @staticmethod
    @translate_errors
    def page(number: int = 1, per_page: int = 25) -> Page[BatchSummary]:
        """One page of batches, newest first; expired ones leave the index as they are met."""
        connection = get_redis()
        total = int(connection.zcard(keys.BATCHES))
        number, per_page = clamp_page(number, per_page)
        start = (number - 1) * per_page
        bids = [as_text(bid) for bid in connection.zrevrange(keys.BATCHES, start, start + per_page - 1)]
        pipe = connection.pipeline(transaction=False)
        for bid in bids:
            pipe.hgetall(keys.batch(bid))
            pipe.scard(keys.batch_failed(bid))
        replies = pipe.execute(raise_on_error=False)
        entries, expired = [], []
        for index, bid in enumerate(bids):
            fields, failed = replies[2 * index], replies[2 * index + 1]
            if not isinstance(fields, dict) or not fields:
                expired.append(bid)  # its keys expired (batch.BATCH_TTL_SECONDS or BATCH_LINGER_SECONDS), or are not a hash
                continue
            text = {as_text(key): as_text(value) for key, value in fields.items()}
            entries.append(_summary(bid, text, failed if isinstance(failed, int) else 0))
        if expired:
            connection.zrem(keys.BATCHES, *expired)
        return Page(entries=entries, total=total - len(expired), number=number, per_page=per_page)

    @staticmethod
    @translate_errors
    def get(bid: str, *, pending_budget: int = PENDING_SCAN_BUDGET) -> BatchDetail | None:
        """One batch with its failed jids and the pending jobs found; None when unknown or expired."""
        connection = get_redis()
        try:
            fields = connection.hgetall(keys.batch(bid))
        except redis.ResponseError:  # WRONGTYPE (another client's key there): no batch of ours
            return None
        if not fields:
            return None
        text = {as_text(key): as_text(value) for key, value in fields.items()}
        failed_jids = [as_text(jid) for jid in connection.sscan_iter(keys.batch_failed(bid), count=SCAN_CHUNK)][:FAILED_JIDS_SHOWN]
        failed = int(connection.scard(keys.batch_failed(bid)))
        summary = _summary(bid, text, failed)
        pending_jobs: list[PendingJob] = []
        everywhere = True
        if summary.pending > 0:
            pending_jobs, everywhere = _pending_jobs(bid, budget=pending_budget, shown=PENDING_JOBS_SHOWN)
        return BatchDetail(
            **{name: getattr(summary, name) for name in BatchSummary.__dataclass_fields__},
            failed_jids=sorted(failed_jids),
            pending_jobs=pending_jobs,
            searched_everywhere=everywhere,
        )
