"""Every Redis key name the engine reads or writes, with its type.

The first block is Sidekiq 6.4's layout (docs/redis-layout.md): Ruby Sidekiq processes, its
Web UI and ours read and write these same keys, byte for byte. There is no namespace prefix.

The second block is our own bookkeeping, all under ``jobsapp:`` so it never collides with
Sidekiq's names and never appears in the ``queues`` set. No other module spells a key literal;
Lua scripts receive every key through KEYS.
"""

from __future__ import annotations

import datetime as dt

# --- Sidekiq's layout -------------------------------------------------------------------

QUEUES = "queues"  # SET of queue names, without the "queue:" prefix
SCHEDULE = "schedule"  # ZSET score=run-at epoch seconds, member=job JSON without at/enqueued_at
RETRY = "retry"  # ZSET score=next attempt epoch seconds, member=job JSON with error fields
DEAD = "dead"  # ZSET score=time of death, trimmed to 180 days / 10,000 entries
PROCESSES = "processes"  # SET of process identities "hostname:pid:<12 hex>"
STAT_PROCESSED = "stat:processed"  # STRING lifetime counter (successes and failures)
STAT_FAILED = "stat:failed"  # STRING lifetime counter

SORTED_SETS = (SCHEDULE, RETRY, DEAD)


def queue(name: str) -> str:
    """LIST of job JSON: producers LPUSH, consumers take from the right end."""
    return f"queue:{name}"


def queue_name(key: str) -> str:
    """The queue name of a ``queue:<name>`` key."""
    return key[len("queue:") :] if key.startswith("queue:") else key


def process(identity: str) -> str:
    """HASH with TTL: info, busy, beat, quiet, rss, rtt_us, concurrency."""
    return identity


def workers(identity: str) -> str:
    """HASH with TTL: thread id -> {"queue","payload","run_at"}; read by Sidekiq 6.4."""
    return f"{identity}:workers"


def work(identity: str) -> str:
    """HASH with TTL: the same content as workers(); read by Sidekiq 7 and later."""
    return f"{identity}:work"


def signals(identity: str) -> str:
    """LIST of signal names (TSTP, TERM, TTIN) any UI pushes; one is taken per heartbeat."""
    return f"{identity}-signals"


def stat_processed_daily(day: dt.date) -> str:
    """STRING daily counter, UTC date, 5-year TTL."""
    return f"stat:processed:{day.isoformat()}"


def stat_failed_daily(day: dt.date) -> str:
    """STRING daily counter, UTC date, 5-year TTL."""
    return f"stat:failed:{day.isoformat()}"


# --- Our own bookkeeping ----------------------------------------------------------------

PREFIX = "jobsapp:"
INFLIGHT_INDEX = "jobsapp:inflight"  # SET of identities that own an in-flight list
RECOVERIES = "jobsapp:recoveries"  # HASH jid -> times the job was recovered from a dead process
PAUSED = "jobsapp:paused"  # SET of paused queue names; fetch skips them
SWEEP_LOCK = "jobsapp:lock:sweep"  # STRING (SET NX PX): one orphan sweeper at a time
OUTBOX_RELAY_LOCK = "jobsapp:lock:outbox_relay"  # STRING (relay_lock.lua): one outbox relay at a time
RESULTS = "jobsapp:results"  # ZSET score=expiry epoch seconds, member=jid of a finished retained job
STAT_EXPIRED = "jobsapp:stat:expired"  # STRING lifetime counter of jobs dropped unrun past expires_at


def inflight(identity: str) -> str:
    """LIST of raw job JSON a process has fetched and not yet acknowledged (reliable fetch)."""
    return f"jobsapp:inflight:{identity}"


def started(identity: str) -> str:
    """HASH jid -> 1: the recovered jobs a process is running right now (see recovery.Quarantine)."""
    return f"jobsapp:started:{identity}"


def last_ack(identity: str) -> str:
    """STRING, TTL 1 h: the token of a process's last applied ack batch, so a batch resent after
    its reply was lost is not counted in the stats twice (see ack.lua)."""
    return f"jobsapp:ack:{identity}"


def stat_expired_daily(day: dt.date) -> str:
    """STRING daily counter of expired jobs, UTC date, 5-year TTL."""
    return f"jobsapp:stat:expired:{day.isoformat()}"


def slot(hostname: str, slot_number: int) -> str:
    """STRING: identity of the process that last ran in this supervisor slot on this host."""
    return f"jobsapp:slot:{hostname}:{slot_number}"


def job_durations(identity: str) -> str:
    """HASH, TTL like the process: per-class duration histogram buckets, read by /jobs/metrics."""
    return f"jobsapp:durations:{identity}"


def result(jid: str) -> str:
    """HASH, TTL = the job's ``retain``: a retained job's status, times, value and last error."""
    return f"jobsapp:result:{jid}"


# --- Periodic jobs: sidekiq-cron 1.8's layout, so Ruby's cron jobs and ours share one list --

CRON_JOBS = "cron_jobs"  # SET of "cron_job:<name>" keys (sidekiq-cron's own set)


def cron_job(name: str) -> str:
    """HASH: sidekiq-cron's fields (name, klass, cron, args, message, status, last_enqueue_time...)
    plus ours, all prefixed ``jobsapp_`` (every, timezone, last tick, last jid, last outcome)."""
    return f"cron_job:{name}"


def cron_job_name(key: str) -> str:
    """The name of a ``cron_job:<name>`` key."""
    return key[len("cron_job:") :] if key.startswith("cron_job:") else key


def cron_job_enqueued(name: str) -> str:
    """ZSET score=tick epoch seconds, member=tick as ISO 8601 UTC: one member per claimed tick
    (ZADD NX is the claim, shared with a Ruby sidekiq-cron poller); trimmed to 24 hours."""
    return f"cron_job:{name}:enqueued"


def cron_job_jid_history(name: str) -> str:
    """LIST of {"jid","enqueued"} JSON, newest first, trimmed to 10 (sidekiq-cron's history)."""
    return f"cron_job:{name}:jid_history"


UNIQUE_LOCK_PATTERN = "jobsapp:unique:*"  # SCAN pattern of every unique_lock() key


def unique_lock(digest: str) -> str:
    """STRING (SET NX PX), value = the jid holding it: the lock of a unique job (class, queue,
    args, kwargs), taken with the push, released at start or success, or when it expires."""
    return f"jobsapp:unique:{digest}"


def chord(chord_id: str) -> str:
    """HASH header jid -> its JSON value, for a Celery-style chord's succeeded header tasks; TTL as their
    results. Written by ``chord_part.lua``, which pushes ``celery.chord_unlock`` with the last part."""
    return f"jobsapp:chord:{chord_id}"


# --- Limiters (jobsapp.limiter) --------------------------------------------------------

LIMITERS = "jobsapp:limiters"  # SET of limiter names, for the dashboard and the CLI


def limiter(name: str) -> str:
    """HASH: a limiter's kind and limit (written on first use), "over_limit" refusals counter,
    and for a bucket limiter its current "interval" and "count"."""
    return f"jobsapp:limiter:{name}"


def queue_limiter(queue_name: str) -> str:
    """The limiter *name* of a ``JOBSAPP["QUEUE_LIMITS"]`` queue ("queue:<name>"): its keys are
    ``limiter(queue_limiter(q))`` and ``limiter_holders(queue_limiter(q))``."""
    return f"queue:{queue_name}"


def limiter_holders(name: str) -> str:
    """ZSET: concurrent: token -> lock expiry (epoch s); window: token -> acquisition time."""
    return f"jobsapp:limiter:{name}:holders"


def limiter_parked(name: str) -> str:
    """LIST: the schedule-set members of jobs a concurrent limiter refused, oldest first; each
    release makes the first one still scheduled due now (limiter_release.lua)."""
    return f"jobsapp:limiter:{name}:parked"


def limiter_permits(identity: str) -> str:
    """HASH: token -> limiter name, the concurrent slots a process holds (TTL: its longest lock
    timeout), so its shutdown and the orphan sweeper release them at once."""
    return f"jobsapp:permits:{identity}"


# --- Redis-only batches (jobsapp.batch) ------------------------------------------------


#: ZSET of batch ids by creation time (epoch seconds): the dashboard's list of batches.
BATCHES = "jobsapp:batches"


def batch(bid: str) -> str:
    """HASH: a batch's total, pending (jobs not yet run once), succeeded, callbacks (class and
    queue of on_complete / on_success), complete_fired / success_fired, description, created_at."""
    return f"jobsapp:batch:{bid}"


def batch_failed(bid: str) -> str:
    """SET of the jids of a batch that failed and have not succeeded since."""
    return f"jobsapp:batch:{bid}:failed"


def batch_succeeded(bid: str) -> str:
    """SET of the jids of a batch that succeeded (each is counted once, however often it runs)."""
    return f"jobsapp:batch:{bid}:succeeded"
