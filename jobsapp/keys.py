"""Every Redis key name the engine reads or writes, with its type.

The first block is Sidekiq 6.4's layout (shared/DESIGN.md §1): Ruby Sidekiq processes, its
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


def inflight(identity: str) -> str:
    """LIST of raw job JSON a process has fetched and not yet acknowledged (reliable fetch)."""
    return f"jobsapp:inflight:{identity}"


def started(identity: str) -> str:
    """HASH jid -> 1: the recovered jobs a process is running right now (see recovery.Quarantine)."""
    return f"jobsapp:started:{identity}"


def slot(hostname: str, slot_number: int) -> str:
    """STRING: identity of the process that last ran in this supervisor slot on this host."""
    return f"jobsapp:slot:{hostname}:{slot_number}"


def job_durations(identity: str) -> str:
    """HASH, TTL like the process: per-class duration histogram buckets, read by /jobs/metrics."""
    return f"jobsapp:durations:{identity}"
