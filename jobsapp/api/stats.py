"""``Stats`` and ``History``: the dashboard's headline numbers, as Sidekiq's ``Sidekiq::Stats``.

``Stats.fetch()`` costs two round trips whatever the number of queues and processes: the first
pipeline reads the lifetime counters (``expired`` is ours, ``jobsapp:stat:expired``), the three set sizes and the members of ``queues``,
``jobsapp:paused`` and ``processes``; the second reads, per process, its ``busy`` and whether its
heartbeat is alive, and per queue its length and oldest job (for latency) and its prioritised
jobs' count (``jobsapp.priority``), which the size includes. Busy threads count
live processes only; ``processes_size`` counts live ones too (Sidekiq's SCARD may include a
process that died less than a minute ago; the dashboard shouldn't).

``History`` reads the daily counters ``stat:processed:YYYY-MM-DD`` / ``stat:failed:YYYY-MM-DD``
(UTC dates) with one MGET each, newest day first, missing days as 0.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

from redis.crc import key_slot

from .. import connection, keys
from ..connection import as_text, get_redis
from .guard import translate_errors
from .queues import QueueSummary, queue_names_commands, queue_names_from, queue_summary_commands, summarize

#: Sidekiq stores five years of daily counters; History refuses to read more.
MAX_HISTORY_DAYS = 5 * 365


def _int(value: bytes | str | None) -> int:
    if value is None:
        return 0
    try:
        return int(float(as_text(value)))
    except (ValueError, OverflowError):  # hostile or garbled counter: shown as 0, never a 500
        return 0


@dataclass(frozen=True)
class History:
    """Processed and failed per UTC day, newest first: ``{"2024-05-01": 12, ...}``."""

    processed: dict[str, int]
    failed: dict[str, int]

    @classmethod
    @translate_errors
    def fetch(cls, days: int = 30, *, start_date: dt.date | None = None) -> History:
        if not 1 <= days <= MAX_HISTORY_DAYS:
            raise ValueError(f"days must be between 1 and {MAX_HISTORY_DAYS}")
        start = start_date or dt.datetime.now(dt.UTC).date()
        dates = [start - dt.timedelta(days=offset) for offset in range(days)]
        pipe = get_redis().pipeline(transaction=False)
        # MGET as a command: a cluster pipeline refuses .mget() (the keys share one slot)
        pipe.execute_command("MGET", *[keys.stat_processed_daily(day) for day in dates])
        pipe.execute_command("MGET", *[keys.stat_failed_daily(day) for day in dates])
        processed, failed = pipe.execute()
        labels = [day.isoformat() for day in dates]
        return cls(
            processed={label: _int(value) for label, value in zip(labels, processed, strict=True)},
            failed={label: _int(value) for label, value in zip(labels, failed, strict=True)},
        )


@dataclass(frozen=True)
class Stats:
    """A snapshot of the whole installation's counters."""

    processed: int
    failed: int
    scheduled_size: int
    retry_size: int
    dead_size: int
    processes_size: int
    workers_size: int
    enqueued: int
    default_queue_latency: float
    queues: list[QueueSummary]
    taken_at: float
    #: jobs dropped unrun past their expires_at (jobsapp:stat:expired; also counted in processed)
    expired: int = 0

    @property
    def busy(self) -> int:
        return self.workers_size

    @property
    def paused_queues(self) -> list[str]:
        return [queue.name for queue in self.queues if queue.paused]

    @classmethod
    @translate_errors
    def fetch(cls, *, now: float | None = None) -> Stats:
        """Everything, in two pipelined round trips."""
        current = time.time() if now is None else now
        connection = get_redis()
        pipe = connection.pipeline(transaction=False)
        pipe.get(keys.STAT_PROCESSED)
        pipe.get(keys.STAT_FAILED)
        pipe.zcard(keys.SCHEDULE)
        pipe.zcard(keys.RETRY)
        pipe.zcard(keys.DEAD)
        pipe.smembers(keys.PAUSED)
        pipe.smembers(keys.PROCESSES)
        pipe.get(keys.STAT_EXPIRED)
        queue_names_commands(pipe)
        processed, failed, scheduled, retries, dead, paused_names, identities, expired, *queue_names = pipe.execute()
        paused = {as_text(name) for name in paused_names}
        names = sorted(queue_names_from(queue_names) | paused)
        processes = sorted(as_text(name) for name in identities)

        pipe = connection.pipeline(transaction=False)
        for identity in processes:
            pipe.hmget(keys.process(identity), "info", "busy")
        queue_summary_commands(pipe, names)
        replies = pipe.execute()
        heartbeats = replies[: len(processes)]
        alive = [busy for info, busy in heartbeats if info is not None]
        queue_replies = replies[len(processes) :]
        summaries = summarize(names, paused, queue_replies, current)
        default = next((summary for summary in summaries if summary.name == "default"), None)
        return cls(
            processed=_int(processed),
            failed=_int(failed),
            scheduled_size=int(scheduled),
            retry_size=int(retries),
            dead_size=int(dead),
            processes_size=len(alive),
            workers_size=sum(_int(busy) for busy in alive),
            enqueued=sum(summary.size for summary in summaries),
            default_queue_latency=default.latency_seconds if default else 0.0,
            queues=summaries,
            taken_at=current,
            expired=_int(expired),
        )

    @staticmethod
    def history(days: int = 30, *, start_date: dt.date | None = None) -> History:
        return History.fetch(days, start_date=start_date)


#: Fields of Redis INFO the dashboard shows, as Sidekiq's Web UI does.
REDIS_INFO_FIELDS = (
    "redis_version",
    "uptime_in_days",
    "connected_clients",
    "used_memory_human",
    "used_memory_peak_human",
    "maxmemory_policy",
)


@dataclass(frozen=True)
class Partition:
    """Where one partition of the engine's keys lives on a Redis Cluster: its hash tag, the slot
    the tag hashes to, and the master (``host:port``) serving that slot now."""

    index: int
    tag: str
    slot: int
    master: str


@translate_errors
def partitions() -> list[Partition]:
    """The engine's partitions on a Redis Cluster and the master of each ([] without a cluster)."""
    client = get_redis()
    if not connection.is_cluster(client):
        return []
    count = keys.partition_count()
    found = []
    for index in range(count):
        with keys.using_partition(index):
            key = keys.QUEUES
        tag = keys.partition_tag(index, count)
        found.append(Partition(index, tag, key_slot(tag.encode("utf-8")), connection.master_name(client, key)))
    return found


@translate_errors
def redis_info() -> dict[str, str]:
    """A few INFO fields of the server (version, uptime, clients, memory, eviction policy)."""
    infos = list(connection.master_infos(get_redis()).values())
    info = infos[0] if infos else {}
    return {name: str(info[name]) for name in REDIS_INFO_FIELDS if name in info}
