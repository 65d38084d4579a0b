"""Every Redis key name the engine reads or writes, with its type.

The first block is Sidekiq 6.4's layout (docs/redis-layout.md): Ruby Sidekiq processes, its
Web UI and ours read and write these same keys, byte for byte. There is no namespace prefix.

The second block is our own bookkeeping, all under ``jobsapp:`` so it never collides with
Sidekiq's names and never appears in the ``queues`` set. No other module spells a key literal;
Lua scripts receive every key through KEYS.

On a Redis Cluster (``JOBSAPP["REDIS_CLUSTER"]``) every name gets a hash tag in front: the
cluster name of a key is ``{<tag>}:`` + its name above (``{jobsapp:0}:queue:default``). A script
only ever touches keys of one tag, so each script's keys share one slot and no command is
cross-slot. The tag is the partition's (``using_partition``; partition 0 outside one), and each
partition's tag is chosen so its slot lies in a share of the 16384 slots of its own
(``partition_tag``), where an evenly created cluster puts a different master. Partition 0, the
home of everything that is not a queue's list or a process's in-flight list, keeps its tag
whatever the number of partitions. Outside cluster mode there is no prefix: the names are the
standalone ones, byte for byte.

Whether the current context talks to a cluster is the connection layer's knowledge (the shard's
settings): it installs the answer with ``use_cluster_mode_source``, so this module reads no
settings and imports nothing of the engine.
"""

from __future__ import annotations

import contextvars
import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

# --- The cluster key scheme -------------------------------------------------------------

#: The hash tags of the partitions are "jobsapp:<index>", or "jobsapp:<index>.<n>" with the
#: smallest n that puts the tag's slot into the partition's share of the slots.
TAG_BASE = "jobsapp"

#: Partition 0's tag, the same for any number of partitions: the home of the engine's shared state.
HOME_TAG = f"{TAG_BASE}:0"
_HOME_PREFIX = f"{{{HOME_TAG}}}:"


def _standalone() -> bool:
    return False


def _one_partition() -> int:
    return 1


_cluster_mode: Callable[[], bool] = _standalone
_partition: contextvars.ContextVar[int] = contextvars.ContextVar("jobsapp_partition", default=0)
_partition_count: Callable[[], int] = _one_partition


def use_cluster_mode_source(cluster_mode: Callable[[], bool], partition_count: Callable[[], int]) -> None:
    """Install how this module learns whether the current context talks to a cluster and how
    many partitions it has (jobsapp.connection does, from the shard's settings)."""
    global _cluster_mode, _partition_count
    _cluster_mode = cluster_mode
    _partition_count = partition_count


def cluster_mode() -> bool:
    """Whether the key names of the current context carry a hash tag."""
    return _cluster_mode()


@cache
def partition_tag(index: int, count: int) -> str:
    """The hash tag (without braces) of partition ``index`` of ``count``.

    Partition 0 is always ``jobsapp:0`` (so changing the number of partitions moves none of the
    state kept there). Cut the slots into ``count`` equal shares, as a cluster created with
    ``count`` equal masters is cut: partition 0 lies in share ``h`` (the one of ``jobsapp:0``'s
    slot), and partition ``i`` in share ``(h + i) % count``, each in a share of its own."""
    if not 0 <= index < count:
        raise ValueError(f"partition {index} of {count} does not exist")
    if index == 0:
        return HOME_TAG
    home_share = key_slot(HOME_TAG.encode("ascii")) * count // REDIS_CLUSTER_HASH_SLOTS
    share = (home_share + index) % count
    low = share * REDIS_CLUSTER_HASH_SLOTS // count
    high = (share + 1) * REDIS_CLUSTER_HASH_SLOTS // count
    candidate = f"{TAG_BASE}:{index}"
    suffix = 0
    while not low <= key_slot(candidate.encode("ascii")) < high:
        suffix += 1
        candidate = f"{TAG_BASE}:{index}.{suffix}"
    return candidate


def partition_count() -> int:
    """How many partitions the current context's cluster has (1 outside cluster mode)."""
    return _partition_count() if _cluster_mode() else 1


def current_partition() -> int:
    """The partition whose tag the key names of this context carry."""
    return _partition.get()


@contextmanager
def using_partition(index: int) -> Iterator[int]:
    """Name the keys of partition ``index`` inside the block (this thread or task only)."""
    token = _partition.set(index)
    try:
        yield index
    finally:
        _partition.reset(token)


def prefix() -> str:
    """What goes in front of every key name here: ``""`` outside cluster mode, else the
    partition's hash tag in braces and a colon."""
    if not _cluster_mode():
        return ""
    index = _partition.get()
    return _HOME_PREFIX if index == 0 else _tagged(index, _partition_count())


@cache
def _tagged(index: int, count: int) -> str:
    """The prefix of partition ``index`` of ``count``: its hash tag in braces and a colon."""
    return f"{{{partition_tag(index, count)}}}:"


def partitions() -> range:
    """The partitions of the current context: ``range(partition_count())``."""
    return range(partition_count())


def in_partition(key: str, index: int) -> str:
    """``key`` (a name of any partition, or ``""``) as the same name in partition ``index``:
    a process's in-flight list there, say. Outside cluster mode, ``key`` itself."""
    if not key or not _cluster_mode():
        return key
    return _tagged(index, _partition_count()) + strip_prefix(key)


def absent() -> str:
    """A KEYS entry that stands for "no key" (a script's optional key left out): ``""``
    standalone; on a cluster the hash tag alone (``{jobsapp:0}:``), so the script's keys still
    share one slot. The scripts test both forms (``given(key)`` in their Lua)."""
    return prefix()


def strip_prefix(key: str) -> str:
    """A key name as read back from Redis, without its hash tag (if any)."""
    if key.startswith("{"):
        end = key.find("}:")
        if end > 0:
            return key[end + 2 :]
    return key


_last_day: tuple[dt.date, str] = (dt.date.min, dt.date.min.isoformat())


def _iso_day(day: dt.date) -> str:
    """``day.isoformat()``, kept for the last day asked: every ack names today's counters."""
    global _last_day
    last = _last_day
    if last[0] == day:
        return last[1]
    text = day.isoformat()
    _last_day = (day, text)
    return text


# --- Sidekiq's layout -------------------------------------------------------------------

QUEUES: str  # SET of queue names, without the "queue:" prefix
SCHEDULE: str  # ZSET score=run-at epoch seconds, member=job JSON without at/enqueued_at
RETRY: str  # ZSET score=next attempt epoch seconds, member=job JSON with error fields
DEAD: str  # ZSET score=time of death, trimmed to 180 days / 10,000 entries
PROCESSES: str  # SET of process identities "hostname:pid:<12 hex>"
STAT_PROCESSED: str  # STRING lifetime counter (successes and failures)
STAT_FAILED: str  # STRING lifetime counter

SORTED_SETS: tuple[str, str, str]  # (SCHEDULE, RETRY, DEAD)


def queue(name: str) -> str:
    """LIST of job JSON: producers LPUSH, consumers take from the right end."""
    return f"{prefix()}queue:{name}"


def queue_name(key: str) -> str:
    """The queue name of a ``queue:<name>`` key."""
    key = strip_prefix(key)
    return key[len("queue:") :] if key.startswith("queue:") else key


def process(identity: str) -> str:
    """HASH with TTL: info, busy, beat, quiet, rss, rtt_us, concurrency."""
    return f"{prefix()}{identity}"


def workers(identity: str) -> str:
    """HASH with TTL: thread id -> {"queue","payload","run_at"}; read by Sidekiq 6.4."""
    return f"{prefix()}{identity}:workers"


def work(identity: str) -> str:
    """HASH with TTL: the same content as workers(); read by Sidekiq 7 and later."""
    return f"{prefix()}{identity}:work"


def signals(identity: str) -> str:
    """LIST of signal names (TSTP, TERM, TTIN) any UI pushes; one is taken per heartbeat."""
    return f"{prefix()}{identity}-signals"


def stat_processed_daily(day: dt.date) -> str:
    """STRING daily counter, UTC date, 5-year TTL."""
    return f"{prefix()}stat:processed:{_iso_day(day)}"


def stat_failed_daily(day: dt.date) -> str:
    """STRING daily counter, UTC date, 5-year TTL."""
    return f"{prefix()}stat:failed:{_iso_day(day)}"


# --- Our own bookkeeping ----------------------------------------------------------------

PREFIX: str  # what every name of our own starts with (after the hash tag, in cluster mode)
INFLIGHT_INDEX: str  # SET of identities that own an in-flight list
RECOVERIES: str  # HASH jid -> times the job was recovered from a dead process
PAUSED: str  # SET of paused queue names; fetch skips them
SWEEP_LOCK: str  # STRING (SET NX PX): one orphan sweeper at a time
SCHEDULERS: str  # ZSET identity -> server time of its scheduler's last poll: the fleet sharing one poll cadence
OUTBOX_RELAY_LOCK: str  # STRING (relay_lock.lua): one outbox relay at a time
OUTBOX_PUSHED: str  # ZSET jid -> push time: outbox entries pushed at commit, for the relay to delete
RESULTS: str  # ZSET score=expiry epoch seconds, member=jid of a finished retained job
STAT_EXPIRED: str  # STRING lifetime counter of jobs dropped unrun past expires_at
CANCELLED: str  # ZSET score=request epoch seconds, member=jid: the cancels asked for lately (jobsapp.cancellation)
CANCEL_CHANNEL: str  # pub/sub channel: each message is the jid of a job to cancel, heard by every worker process
PRIORITISED: str  # SET of queue names whose priority_queue() holds jobs: the index fetch reads first (jobsapp.priority)
PRIORITY_SEQUENCE: str  # STRING counter: the arrival order of prioritised jobs, FIFO within one priority
CELERY_REVOKED_STAMPS: str  # SET of ["header", value] JSON: Celery stamps revoked fleet-wide, kept until cleared (jobsapp.celery.stamping)


def inflight(identity: str) -> str:
    """LIST of raw job JSON a process has fetched and not yet acknowledged (reliable fetch)."""
    return f"{prefix()}jobsapp:inflight:{identity}"


def fenced(identity: str) -> str:
    """STRING with TTL (a day), set when another process recovered ``identity``'s in-flight list:
    that process was declared dead, and its heartbeat, if it still beats, fences it."""
    return f"{prefix()}jobsapp:fenced:{identity}"


def priority_queue(name: str) -> str:
    """ZSET score=rank, member=job JSON: the jobs of queue ``name`` pushed with a priority other
    than 0 (``jobsapp.priority``); the lowest rank runs first. Ruby processes never read it."""
    return f"{prefix()}jobsapp:pqueue:{name}"


def priority_wake(name: str) -> str:
    """LIST of at most one token, pushed with each prioritised job of queue ``name``: an idle
    worker that has seen prioritised jobs blocks on it beside the queue's list (BLPOP), so such a
    push wakes it as a plain push does."""
    return f"{prefix()}jobsapp:pwake:{name}"


def started(identity: str) -> str:
    """HASH jid -> 1: the recovered jobs a process is running right now (see recovery.Quarantine)."""
    return f"{prefix()}jobsapp:started:{identity}"


def last_ack(identity: str) -> str:
    """STRING, TTL 1 h: the token of a process's last applied ack batch, so a batch resent after
    its reply was lost is not counted in the stats twice (see ack.lua)."""
    return f"{prefix()}jobsapp:ack:{identity}"


def stat_expired_daily(day: dt.date) -> str:
    """STRING daily counter of expired jobs, UTC date, 5-year TTL."""
    return f"{prefix()}jobsapp:stat:expired:{_iso_day(day)}"


def slot(hostname: str, slot_number: int) -> str:
    """STRING: identity of the process that last ran in this supervisor slot on this host."""
    return f"{prefix()}jobsapp:slot:{hostname}:{slot_number}"


def job_durations(identity: str) -> str:
    """HASH, TTL like the process: per-class duration histogram buckets, read by /jobs/metrics."""
    return f"{prefix()}jobsapp:durations:{identity}"


def result(jid: str) -> str:
    """HASH, TTL = the job's ``retain``: a retained job's status, times, value and last error."""
    return f"{prefix()}jobsapp:result:{jid}"


# --- Periodic jobs: sidekiq-cron 1.8's layout, so Ruby's cron jobs and ours share one list --

CRON_JOBS: str  # SET of "cron_job:<name>" keys (sidekiq-cron's own set)


def cron_job(name: str) -> str:
    """HASH: sidekiq-cron's fields (name, klass, cron, args, message, status, last_enqueue_time...)
    plus ours, all prefixed ``jobsapp_`` (every, timezone, last tick, last jid, last outcome)."""
    return f"{prefix()}cron_job:{name}"


def cron_job_name(key: str) -> str:
    """The name of a ``cron_job:<name>`` key."""
    key = strip_prefix(key)
    return key[len("cron_job:") :] if key.startswith("cron_job:") else key


def cron_job_enqueued(name: str) -> str:
    """ZSET score=tick epoch seconds, member=tick as ISO 8601 UTC: one member per claimed tick
    (ZADD NX is the claim, shared with a Ruby sidekiq-cron poller); trimmed to 24 hours."""
    return f"{prefix()}cron_job:{name}:enqueued"


def cron_job_jid_history(name: str) -> str:
    """LIST of {"jid","enqueued"} JSON, newest first, trimmed to 10 (sidekiq-cron's history)."""
    return f"{prefix()}cron_job:{name}:jid_history"


UNIQUE_LOCK_PATTERN: str  # SCAN pattern of every unique_lock() key


def unique_lock(digest: str) -> str:
    """STRING (SET NX PX), value = the jid holding it: the lock of a unique job (class, queue,
    args, kwargs), taken with the push, released at start or success, or when it expires."""
    return f"{prefix()}jobsapp:unique:{digest}"


def chord(chord_id: str) -> str:
    """HASH header jid -> its JSON value, for a Celery-style chord's succeeded header tasks; TTL as their
    results. Written by ``chord_part.lua``, which pushes ``celery.chord_unlock`` with the last part."""
    return f"{prefix()}jobsapp:chord:{chord_id}"


def chord_added(chord_id: str) -> str:
    """LIST of the header jids added to a Celery-style chord after it was applied (``add_to_chord``, a
    lazy header), in order; their count is the chord hash's ``+added`` field. TTL as the chord's hash."""
    return f"{prefix()}jobsapp:chord-added:{chord_id}"


def chord_failed(chord_id: str) -> str:
    """STRING set (NX) by the first header part of a Celery-style chord run that fails for good: the
    callback is recorded FAILED and its errbacks called once, however many parts fail. TTL as results."""
    return f"{prefix()}jobsapp:chord-failed:{chord_id}"


def celery_group(group_id: str) -> str:
    """STRING: a Celery ``GroupResult.save()``'d ids (its ``as_tuple()`` as JSON); TTL as results."""
    return f"{prefix()}jobsapp:celery-group:{group_id}"


# --- Limiters (jobsapp.limiter) --------------------------------------------------------

LIMITERS: str  # SET of limiter names, for the dashboard and the CLI


def limiter(name: str) -> str:
    """HASH: a limiter's kind and limit (written on first use), "over_limit" refusals counter,
    and for a bucket limiter its current "interval" and "count"."""
    return f"{prefix()}jobsapp:limiter:{name}"


def queue_limiter(queue_name: str) -> str:
    """The limiter *name* of a ``JOBSAPP["QUEUE_LIMITS"]`` queue ("queue:<name>"): its keys are
    ``limiter(queue_limiter(q))`` and ``limiter_holders(queue_limiter(q))``."""
    return f"queue:{queue_name}"


def limiter_holders(name: str) -> str:
    """ZSET: concurrent: token -> lock expiry (epoch s); window: token -> acquisition time."""
    return f"{prefix()}jobsapp:limiter:{name}:holders"


def limiter_parked(name: str) -> str:
    """LIST: the schedule-set members of jobs a concurrent limiter refused, oldest first; each
    release makes the first one still scheduled due now (limiter_release.lua)."""
    return f"{prefix()}jobsapp:limiter:{name}:parked"


def limiter_permits(identity: str) -> str:
    """HASH: token -> limiter name, the concurrent slots a process holds (TTL: its longest lock
    timeout), so its shutdown and the orphan sweeper release them at once."""
    return f"{prefix()}jobsapp:permits:{identity}"


# --- Redis-only batches (jobsapp.batch) ------------------------------------------------


#: ZSET of batch ids by creation time (epoch seconds): the dashboard's list of batches.
BATCHES: str


def batch(bid: str) -> str:
    """HASH: a batch's total, pending (jobs not yet run once), succeeded, callbacks (class and
    queue of on_complete / on_success), complete_fired / success_fired, description, created_at."""
    return f"{prefix()}jobsapp:batch:{bid}"


def batch_failed(bid: str) -> str:
    """SET of the jids of a batch that failed and have not succeeded since."""
    return f"{prefix()}jobsapp:batch:{bid}:failed"


def batch_succeeded(bid: str) -> str:
    """SET of the jids of a batch that succeeded (each is counted once, however often it runs)."""
    return f"{prefix()}jobsapp:batch:{bid}:succeeded"


# --- Names without arguments -----------------------------------------------------------
# Declared above with their types; their values are looked up here on each use, with the hash tag
# of the current context in front (PEP 562: a module attribute missing from the module's dict).

_NAMED: dict[str, str] = {
    "QUEUES": "queues",
    "SCHEDULE": "schedule",
    "RETRY": "retry",
    "DEAD": "dead",
    "PROCESSES": "processes",
    "STAT_PROCESSED": "stat:processed",
    "STAT_FAILED": "stat:failed",
    "PREFIX": "jobsapp:",
    "INFLIGHT_INDEX": "jobsapp:inflight",
    "RECOVERIES": "jobsapp:recoveries",
    "PAUSED": "jobsapp:paused",
    "SWEEP_LOCK": "jobsapp:lock:sweep",
    "SCHEDULERS": "jobsapp:schedulers",
    "OUTBOX_RELAY_LOCK": "jobsapp:lock:outbox_relay",
    "OUTBOX_PUSHED": "jobsapp:outbox:pushed",
    "RESULTS": "jobsapp:results",
    "STAT_EXPIRED": "jobsapp:stat:expired",
    "CANCELLED": "jobsapp:cancelled",
    "CANCEL_CHANNEL": "jobsapp:cancel",
    "PRIORITISED": "jobsapp:prioritised",
    "PRIORITY_SEQUENCE": "jobsapp:priority:sequence",
    "CELERY_REVOKED_STAMPS": "jobsapp:celery-revoked-stamps",
    "CRON_JOBS": "cron_jobs",
    "UNIQUE_LOCK_PATTERN": "jobsapp:unique:*",
    "LIMITERS": "jobsapp:limiters",
    "BATCHES": "jobsapp:batches",
}


def __getattr__(name: str) -> Any:
    value = _NAMED.get(name)
    if value is not None:
        return prefix() + value
    if name == "SORTED_SETS":
        tag = prefix()
        return (tag + _NAMED["SCHEDULE"], tag + _NAMED["RETRY"], tag + _NAMED["DEAD"])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
