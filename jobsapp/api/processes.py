"""``ProcessSet`` and ``WorkSet``: the worker processes sharing this Redis and what they run.

Any Sidekiq-compatible process (ours, or Ruby Sidekiq 6.4 / 7) registers its identity in the
``processes`` SET and refreshes an ``<identity>`` HASH with a 60 s TTL every few seconds (``info``
JSON, ``busy``, ``beat``, ``quiet``, ``rss``, ``rtt_us``). A name in the SET whose HASH has expired
is a dead process: listing prunes it, as Sidekiq's ``ProcessSet#cleanup``. Listing all
processes is one pipeline (HMGET per identity).

Running jobs live in ``<identity>:work`` (Sidekiq 7+) or ``<identity>:workers`` (6.4): thread id
-> JSON ``{"queue", "payload", "run_at"}`` where ``payload`` is the raw job JSON as a string
(or, from older writers, an object). ``WorkSet`` reads both for every live process in one
pipeline, preferring ``:work``.

``ReservedSet`` lists the jobs a live process has fetched and not started (its look-ahead): those
of its in-flight list (``jobsapp:inflight:<identity>``, in every partition on a partitioned
cluster; reliable fetch only, ours only) that its ``:work`` hash does not show running.

Signals: ``quiet``/``stop``/``dump_threads`` LPUSH ``TSTP``/``TERM``/``TTIN`` onto
``<identity>-signals`` and set a 60 s TTL in one MULTI, exactly as Sidekiq's Web UI, so they reach
Ruby processes too. Only identities present in ``processes`` are signalled: a form cannot make us
write a key of its choosing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import keys
from ..connection import as_text, get_redis
from ..payload import compact_json, parse_json
from ..processes import PROCESS_FIELDS, DurationHistogram, identities, prune_dead
from .guard import translate_errors
from .records import JobRecord

SIGNAL_TTL_SECONDS = 60
SIGNALS = {"quiet": "TSTP", "stop": "TERM", "dump_threads": "TTIN"}


def _text(value: bytes | str | None) -> str:
    """A reply field as text; a missing field (None) is empty."""
    return "" if value is None else as_text(value)


def _number(value: bytes | str | None, kind: type[int] | type[float]) -> Any:
    try:
        return kind(float(_text(value))) if value is not None else kind(0)
    except (ValueError, OverflowError):  # hostile or garbled field: shown as 0, never a 500
        return kind(0)


@dataclass(frozen=True)
class Process:
    """One live worker process, from its heartbeat hash."""

    identity: str
    info: dict[str, Any]
    busy: int
    beat: float
    quiet: bool
    rss_kb: int
    rtt_us: int

    @property
    def hostname(self) -> str:
        return str(self.info.get("hostname", ""))

    @property
    def pid(self) -> int | None:
        value = self.info.get("pid")
        return value if isinstance(value, int) else None

    @property
    def tag(self) -> str:
        return str(self.info.get("tag") or "")

    @property
    def labels(self) -> list[str]:
        value = self.info.get("labels")
        return [str(label) for label in value] if isinstance(value, list) else []

    @property
    def queues(self) -> list[str]:
        value = self.info.get("queues")
        return [str(queue) for queue in value] if isinstance(value, list) else []

    @property
    def concurrency(self) -> int:
        value = self.info.get("concurrency")
        return value if isinstance(value, int) else 0

    @property
    def started_at(self) -> float | None:
        value = self.info.get("started_at")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def version(self) -> str:
        return str(self.info.get("version") or "")

    @property
    def stopping(self) -> bool:
        """Sidekiq's name for a quiet process (it will not fetch again)."""
        return self.quiet

    def seconds_since_beat(self, *, now: float | None = None) -> float:
        return max((time.time() if now is None else now) - self.beat, 0.0)


@dataclass(frozen=True)
class Work:
    """One running job: which process and thread, since when, and the job."""

    identity: str
    thread_id: str
    queue: str
    run_at: float
    record: JobRecord = field(compare=False)

    @property
    def timeout_seconds(self) -> float | None:
        """The job's ``sidekiq_options(timeout=...)`` from its payload; None without one (or a
        garbled one: the page shows the job, not an error)."""
        value = self.record.get("timeout")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            return None
        return float(value)

    def elapsed_seconds(self, *, now: float | None = None) -> float:
        """How long it has been running (``run_at`` is whole seconds, as Sidekiq writes it)."""
        return max((time.time() if now is None else now) - self.run_at, 0.0) if self.run_at else 0.0

    def overrunning(self, *, now: float | None = None) -> bool:
        """Whether it has run past its timeout (JobTimeout was raised, or the job ignores it)."""
        timeout = self.timeout_seconds
        return timeout is not None and self.elapsed_seconds(now=now) > timeout


def _per_process(connection: Any, queue_commands: Callable[[Any, str], object], *, each: int = 1) -> list[tuple[str, Any]]:
    """Pipeline ``each`` commands per identity in ``processes`` (in identity order), one round trip:
    [(identity, reply)] when ``each`` is 1, else [(identity, [replies...])]."""
    names = identities(connection)
    if not names:
        return []
    pipe = connection.pipeline(transaction=False)
    for identity in names:
        queue_commands(pipe, identity)
    replies = pipe.execute()
    if each == 1:
        return list(zip(names, replies, strict=True))
    return [(identity, replies[index * each : (index + 1) * each]) for index, identity in enumerate(names)]


class ProcessSet:
    """The live processes; constructing nothing, every method reads Redis afresh."""

    @staticmethod
    @translate_errors
    def all(*, prune: bool = True) -> list[Process]:
        """Every live process, sorted by identity; dead names are pruned from ``processes``."""
        connection = get_redis()
        replies = _per_process(connection, lambda pipe, identity: pipe.hmget(keys.process(identity), *PROCESS_FIELDS))
        processes = []
        dead = []
        for identity, (info, busy, beat, quiet, rss, rtt_us) in replies:
            if info is None:
                dead.append(identity)
                continue
            try:
                decoded = parse_json(info)
            except ValueError:  # a garbled info still shows the process
                decoded = {}
            if not isinstance(decoded, dict):
                decoded = {}
            processes.append(
                Process(
                    identity=identity,
                    info=decoded,
                    busy=_number(busy, int),
                    beat=_number(beat, float),
                    quiet=_text(quiet) == "true",
                    rss_kb=_number(rss, int),
                    rtt_us=_number(rtt_us, int),
                )
            )
        if prune and dead:
            connection.srem(keys.PROCESSES, *dead)
        return processes

    @staticmethod
    @translate_errors
    def cleanup() -> int:
        """Remove identities whose heartbeat hash expired; returns how many."""
        return prune_dead(get_redis())

    @staticmethod
    @translate_errors
    def size() -> int:
        """Names in ``processes`` (not pruned: may count a process that died < 60 s ago)."""
        return int(get_redis().scard(keys.PROCESSES))

    @staticmethod
    @translate_errors
    def signal(identity: str, signal_name: str) -> bool:
        """Push a signal for a live process; False (nothing written) for an unknown identity."""
        if signal_name not in SIGNALS.values():
            raise ValueError(f"unknown signal {signal_name!r}; expected one of {sorted(SIGNALS.values())}")
        connection = get_redis()
        if not connection.sismember(keys.PROCESSES, identity):
            return False
        pipe = connection.pipeline(transaction=True)
        pipe.lpush(keys.signals(identity), signal_name)
        pipe.expire(keys.signals(identity), SIGNAL_TTL_SECONDS)
        pipe.execute()
        return True

    @classmethod
    def quiet(cls, identity: str) -> bool:
        """Ask the process to stop fetching new jobs (TSTP)."""
        return cls.signal(identity, SIGNALS["quiet"])

    @classmethod
    def stop(cls, identity: str) -> bool:
        """Ask the process to shut down (TERM): finish or requeue its jobs, then exit."""
        return cls.signal(identity, SIGNALS["stop"])

    @classmethod
    def dump_threads(cls, identity: str) -> bool:
        """Ask the process to log every thread's stack (TTIN)."""
        return cls.signal(identity, SIGNALS["dump_threads"])


def _work_entry(identity: str, thread_id: bytes, value: bytes) -> Work | None:
    try:
        decoded = parse_json(value)
    except ValueError:  # a garbled entry is skipped: the job itself is fine
        return None
    if not isinstance(decoded, dict):
        return None
    payload = decoded.get("payload")
    if isinstance(payload, dict):
        raw: bytes | str = compact_json(payload, allow_nan=True)
    elif isinstance(payload, (str, bytes)):
        raw = payload
    else:
        raw = b""
    queue = decoded.get("queue")
    run_at = decoded.get("run_at")
    record = JobRecord(raw, queue=queue if isinstance(queue, str) else None)
    return Work(
        identity=identity,
        thread_id=_text(thread_id),
        queue=record.queue,
        run_at=float(run_at) if isinstance(run_at, (int, float)) and not isinstance(run_at, bool) else 0.0,
        record=record,
    )


class WorkSet:
    """The jobs running right now in every live process (as fresh as their last heartbeat)."""

    @staticmethod
    @translate_errors
    def all() -> list[Work]:
        """Running jobs, longest running first."""

        def queue_commands(pipe: Any, identity: str) -> None:
            pipe.exists(keys.process(identity))
            pipe.hgetall(keys.work(identity))
            pipe.hgetall(keys.workers(identity))

        running = []
        for identity, (alive, work, workers) in _per_process(get_redis(), queue_commands, each=3):
            if not alive:
                continue
            for thread_id, value in (work or workers).items():
                entry = _work_entry(identity, thread_id, value)
                if entry is not None:
                    running.append(entry)
        running.sort(key=lambda entry: entry.run_at)
        return running

    @staticmethod
    @translate_errors
    def size() -> int:
        """Busy threads as the processes last reported them (sum of ``busy``)."""
        replies = _per_process(get_redis(), lambda pipe, identity: pipe.hget(keys.process(identity), "busy"))
        return sum(_number(busy, int) for _, busy in replies)

    @classmethod
    def find_job(cls, jid: str) -> Work | None:
        for entry in cls.all():
            if jid and entry.record.jid == jid:
                return entry
        return None


@dataclass(frozen=True)
class Reserved:
    """A job a live process has fetched and not started."""

    identity: str
    record: JobRecord = field(compare=False)


class ReservedSet:
    """Jobs fetched and not started, per live process: its in-flight list minus what its heartbeat
    shows running. The running jobs are as fresh as the last heartbeat, and a finished job stays
    in the in-flight list until its acknowledgement (batched): a job that started or ended in the
    last few seconds may still be listed. A process with basic fetch, or a Ruby one, has none."""

    @staticmethod
    @translate_errors
    def all() -> list[Reserved]:
        """In each process's fetch order (the in-flight list's), processes by identity."""
        connection = get_redis()
        partitions = list(keys.partitions())

        def queue_commands(pipe: Any, identity: str) -> None:
            pipe.exists(keys.process(identity))
            pipe.hvals(keys.work(identity))
            for index in partitions:
                pipe.lrange(keys.in_partition(keys.inflight(identity), index), 0, -1)

        reserved = []
        for identity, (alive, running, *inflight) in _per_process(connection, queue_commands, each=2 + len(partitions)):
            if not alive:
                continue
            started = {entry.record.jid for value in running if (entry := _work_entry(identity, b"", value)) is not None}
            for raws in inflight:
                for raw in reversed(raws or []):  # fetch.lua pushes each job at the head: the oldest is last
                    record = JobRecord(raw)
                    if record.jid and record.jid not in started:
                        reserved.append(Reserved(identity=identity, record=record))
        return reserved


@translate_errors
def job_durations() -> dict[str, DurationHistogram]:
    """Per-class duration histograms summed over live processes (ours write them with every
    heartbeat to ``jobsapp:durations:<identity>``, in the JSON of ``jobsapp.processes``). A process that
    exits takes its counts with it: Prometheus sees a counter reset, which rate() handles."""
    connection = get_redis()
    names = identities(connection)
    if not names:
        return {}
    pipe = connection.pipeline(transaction=False)
    for identity in names:
        pipe.hgetall(keys.job_durations(identity))
    merged: dict[str, DurationHistogram] = {}
    empty = DurationHistogram({}, 0.0, 0)
    for histograms in pipe.execute():
        for job_class, encoded in histograms.items():
            histogram = DurationHistogram.decode(encoded)
            if histogram is None:  # a garbled histogram is left out of the scrape
                continue
            name = _text(job_class)
            merged[name] = merged.get(name, empty).plus(histogram)
    return merged
