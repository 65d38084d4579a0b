"""``Queue``: one ``queue:<name>`` LIST, as Sidekiq's ``Sidekiq::Queue``, plus pause and resume.

Producers LPUSH, consumers take from the right, so index 0 is the newest job and -1 the oldest;
latency is now minus the oldest job's ``enqueued_at`` (float seconds, or Sidekiq 8's integer
milliseconds). Listing reads pages with LRANGE. Deleting a job sends back the raw bytes read
(LREM count 1): the job is removed exactly, or not at all if a worker took it first.

``clear`` takes the jobs the queue holds, oldest first, ``SCAN_CHUNK`` per ``RPOP``, then forgets
the name in ``queues`` as Sidekiq does. Every job a delete or a clear took has ended: it goes
through the "job ended" door as ``DELETED`` (``endings``: its unique lock released, its batch
counting it, ``on_dead`` for tracking). Pausing adds
the name to ``jobsapp:paused`` (fetch skips it; jobs stay and new pushes still land); a paused
queue keeps showing in ``Queue.all()`` even when empty, so it can always be resumed. Redis
connection errors raise ``RedisUnavailable``.

On a partitioned cluster (``JOBSAPP["CLUSTER_PARTITIONS"]``) a queue is one list per partition:
its size is their sum, its latency its oldest job's, a page lists partition 0's jobs, then
partition 1's, and so on; the names are the union of every partition's ``queues`` set. Pausing
writes every partition's ``jobsapp:paused`` (each partition's fetch reads its own).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from .. import keys
from ..connection import as_text, get_redis
from ..ending import Fate, may_hear
from .endings import ended
from .guard import translate_errors
from .records import JobRecord, Page, clamp_page

#: Jobs read per LRANGE when scanning a whole queue (find_job, delete by jid).
SCAN_CHUNK = 1000


def latency_of(oldest_raw: bytes | str | None, now: float) -> float:
    """Seconds since the oldest job (the rightmost entry) was enqueued; 0 for an empty queue."""
    if not oldest_raw:
        return 0.0
    return JobRecord(oldest_raw).latency(now=now)


#: How many replies ``queue_summary_commands`` queues per name and partition.
SUMMARY_REPLIES = 3


def queue_names_commands(pipe: Any) -> None:
    """Queue on ``pipe`` the reads of every partition's ``queues`` set (one outside a
    partitioned cluster), for ``queue_names_from``."""
    for index in keys.partitions():
        with keys.using_partition(index):
            pipe.smembers(keys.QUEUES)


def queue_names_from(replies: list[Any]) -> set[str]:
    """The queue names in the replies of ``queue_names_commands``."""
    return {as_text(name) for members in replies for name in members}


def queue_summary_commands(pipe: Any, names: list[str]) -> None:
    """Queue on ``pipe``, per name and partition, the commands ``summarize`` reads: LLEN and
    LRANGE -1 -1 of its list, ZCARD of its prioritised jobs (``jobsapp.priority``; same hash tag
    on a cluster)."""
    for name in names:
        for index in keys.partitions():
            with keys.using_partition(index):
                pipe.llen(keys.queue(name))
                pipe.lrange(keys.queue(name), -1, -1)
                pipe.zcard(keys.priority_queue(name))


def summarize(names: list[str], paused: set[str], replies: list[Any], now: float) -> list[QueueSummary]:
    """Summaries from the replies of ``queue_summary_commands``; largest first. A queue's size
    counts its lists and its prioritised jobs, as ``Queue.size``; its latency is its lists'
    oldest job's."""
    summaries = []
    per_name = SUMMARY_REPLIES * keys.partition_count()
    for index, name in enumerate(names):
        mine = replies[per_name * index : per_name * (index + 1)]
        size = 0
        latency = 0.0
        for part in range(0, per_name, SUMMARY_REPLIES):
            listed, oldest, ranked = mine[part : part + SUMMARY_REPLIES]
            size += int(listed) + int(ranked)
            latency = max(latency, latency_of(oldest[0] if oldest else None, now))
        summaries.append(QueueSummary(name, size, latency, name in paused))
    summaries.sort(key=lambda summary: (-summary.size, summary.name))
    return summaries


@dataclass(frozen=True)
class QueueSummary:
    """A queue's size, latency and pause state, read in one pipeline with all the others."""

    name: str
    size: int
    latency_seconds: float
    paused: bool


class Queue:
    """A queue by name (without the ``queue:`` prefix)."""

    def __init__(self, name: str = "default") -> None:
        self.name = str(name)
        self.key = keys.queue(self.name)
        #: the queue's list in each partition (``[key]`` outside a partitioned cluster)
        self.keys = [keys.in_partition(self.key, index) for index in keys.partitions()]

    def __repr__(self) -> str:
        return f"<Queue {self.name!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Queue) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    # --- listing all queues -----------------------------------------------------------

    @classmethod
    @translate_errors
    def names(cls) -> list[str]:
        """Every queue in ``queues`` plus every paused queue, sorted."""
        pipe = get_redis().pipeline(transaction=False)
        pipe.smembers(keys.PAUSED)
        queue_names_commands(pipe)
        paused, *known = pipe.execute()
        return sorted(queue_names_from(known) | {as_text(name) for name in paused})

    @classmethod
    def all(cls) -> list[Queue]:
        return [cls(name) for name in cls.names()]

    @classmethod
    @translate_errors
    def summaries(cls, *, now: float | None = None) -> list[QueueSummary]:
        """Size, latency and pause state of every queue in two round trips, largest first."""
        current = time.time() if now is None else now
        connection = get_redis()
        pipe = connection.pipeline(transaction=False)
        pipe.smembers(keys.PAUSED)
        queue_names_commands(pipe)
        paused_raw, *known = pipe.execute()
        paused = {as_text(name) for name in paused_raw}
        names = sorted(queue_names_from(known) | paused)
        return cls._summaries_for(names, paused, current)

    @classmethod
    def _summaries_for(cls, names: list[str], paused: set[str], now: float) -> list[QueueSummary]:
        if not names:
            return []
        pipe = get_redis().pipeline(transaction=False)
        queue_summary_commands(pipe, names)
        return summarize(names, paused, pipe.execute(), now)

    # --- one queue ----------------------------------------------------------------------

    @translate_errors
    def size(self) -> int:
        """The jobs waiting: its lists' and its prioritised ones (``jobsapp.priority``)."""
        pipe = get_redis().pipeline(transaction=False)
        for key in self.keys:
            pipe.llen(key)
        pipe.zcard(keys.priority_queue(self.name))
        return sum(int(reply) for reply in pipe.execute())

    @translate_errors
    def latency(self, *, now: float | None = None) -> float:
        """Seconds the oldest job has waited."""
        current = time.time() if now is None else now
        pipe = get_redis().pipeline(transaction=False)
        for key in self.keys:
            pipe.lrange(key, -1, -1)
        return max(latency_of(oldest[0] if oldest else None, current) for oldest in pipe.execute())

    @translate_errors
    def is_paused(self) -> bool:
        return bool(get_redis().sismember(keys.PAUSED, self.name))

    @translate_errors
    def pause(self) -> None:
        """Fetch stops taking from this queue; pushes still land in it."""
        client = get_redis()
        for index in reversed(keys.partitions()):  # partition 0's, which the operators read, last
            client.sadd(keys.in_partition(keys.PAUSED, index), self.name)

    @translate_errors
    def resume(self) -> None:
        client = get_redis()
        for index in reversed(keys.partitions()):
            client.srem(keys.in_partition(keys.PAUSED, index), self.name)

    @translate_errors
    def page(self, number: int = 1, per_page: int = 25) -> Page[JobRecord]:
        """Jobs newest first (index 0 is the last pushed; on a partitioned cluster, partition 0's
        jobs, then partition 1's, ...); ``total`` is the queue size."""
        number, per_page = clamp_page(number, per_page)
        start = (number - 1) * per_page
        client = get_redis()
        if len(self.keys) == 1:
            pipe = client.pipeline(transaction=False)
            pipe.llen(self.key)
            pipe.lrange(self.key, start, start + per_page - 1)
            total, raws = pipe.execute()
            return Page([JobRecord(raw, queue=self.name) for raw in raws], int(total), number, per_page)
        pipe = client.pipeline(transaction=False)
        for key in self.keys:
            pipe.llen(key)
        sizes = [int(size) for size in pipe.execute()]
        records: list[JobRecord] = []
        offset = start
        for key, size in zip(self.keys, sizes, strict=True):
            if offset >= size:
                offset -= size
                continue
            wanted = per_page - len(records)
            records.extend(JobRecord(raw, queue=self.name) for raw in client.lrange(key, offset, offset + wanted - 1))
            offset = 0
            if len(records) >= per_page:
                break
        return Page(records, sum(sizes), number, per_page)

    def __iter__(self) -> Iterator[JobRecord]:
        return self.scan()

    def scan(self, *, needle: bytes | None = None) -> Iterator[JobRecord]:
        """Every job, newest first (partition by partition), read SCAN_CHUNK at a time; only
        those containing ``needle``."""
        read_chunk = translate_errors(get_redis().lrange)
        for key in self.keys:
            start = 0
            while True:
                raws = read_chunk(key, start, start + SCAN_CHUNK - 1)
                if not raws:
                    break
                for raw in raws:
                    if needle is None or needle in raw:
                        yield JobRecord(raw, queue=self.name)
                start += SCAN_CHUNK

    def find_job(self, jid: str) -> JobRecord | None:
        """The job with this jid, or None. O(queue size): for operators, not for app logic."""
        if not jid:
            return None
        for record in self.scan(needle=jid.encode("utf-8")):
            if record.jid == jid:
                return record
        return None

    @translate_errors
    def delete(self, record: JobRecord, *, fate: Fate = Fate.DELETED) -> bool:
        """Remove exactly this job (by its raw bytes); False if it was no longer there. A removed
        job has ended with ``fate`` (``REVOKED`` for Celery's revoke): its features and server
        middleware hear it (``jobsapp.ending``)."""
        client = get_redis()
        removed = any(client.lrem(key, 1, record.raw) for key in self.keys)  # type: ignore[arg-type]
        if removed:
            ended(client, [record], fate)
        return removed

    def delete_job(self, jid: str) -> bool:
        """Find the job by jid and remove it; False when it is not (or no longer) in the queue."""
        record = self.find_job(jid)
        return record is not None and self.delete(record)

    @translate_errors
    def clear(self) -> int:
        """Drop every job the queue holds and forget the queue name; returns how many jobs were
        dropped. Each ends ``DELETED`` through the door; a job pushed while the queue is being
        cleared may stay (as many jobs are taken as the queue held when the clear began)."""
        client = get_redis()
        dropped = 0
        for key in self.keys:
            remaining = int(client.llen(key))
            while remaining > 0:
                raws = cast("list[bytes] | None", client.rpop(key, min(SCAN_CHUNK, remaining)))
                if not raws:
                    break  # workers took the rest
                dropped += len(raws)
                remaining -= len(raws)
                ended(client, [JobRecord(raw, queue=self.name) for raw in raws if may_hear(raw)], Fate.DELETED)
        ranked_key = keys.priority_queue(self.name)
        remaining = int(client.zcard(ranked_key))
        while remaining > 0:  # its prioritised jobs (jobsapp.priority)
            popped = cast("list[tuple[bytes, float]]", client.zpopmin(ranked_key, min(SCAN_CHUNK, remaining)))
            if not popped:
                break  # workers took the rest
            dropped += len(popped)
            remaining -= len(popped)
            ended(client, [JobRecord(raw, queue=self.name) for raw, _ in popped if may_hear(raw)], Fate.DELETED)
        client.srem(keys.PRIORITISED, self.name)
        for index in keys.partitions():
            client.srem(keys.in_partition(keys.QUEUES, index), self.name)
        return dropped
