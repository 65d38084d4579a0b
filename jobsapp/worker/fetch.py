"""Fetch strategies: how a worker process takes jobs from Redis and gives back the ones it
did not finish. Run by the manager's fetcher thread (``jobsapp.fetcher``) and, for acks, its
acker thread (``jobsapp.acker``).

Reliable fetch (the default) moves jobs atomically from ``queue:<name>`` into this process's
in-flight list ``jobsapp:inflight:<identity>`` (``fetch.lua``: up to a batch per round trip;
``BLMOVE`` when every queue is empty, so an idle worker wakes within a millisecond of a push).
A job leaves the in-flight list only by being acknowledged (``ack.lua``, batched), filed in the
retry or dead set (``retry.lua``), or put back at the front of its queue (``requeue.lua``). A
process killed with SIGKILL therefore loses nothing: its list is recovered on restart in the
same slot, or by the orphan sweeper once its heartbeat key has expired (``recovery``).

Basic fetch is Sidekiq's ``BRPOP``: a job is only in the worker's memory while it runs, so a
SIGKILL loses the running jobs. It exists for parity and to show what reliable fetch prevents.

Queue order follows Sidekiq's CLI: ``-q a -q b`` is strict (always a before b); any weight
(``-q a,3 -q b``) makes the order weighted-random per fetch, drawn as Sidekiq draws it
(shuffle a list holding each queue ``weight`` times, keep first occurrences).
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import redis

from .. import connection, keys, scripts
from ..connection import as_bytes, as_text
from ..scripts import Acknowledged
from .pop_connection import PopConnection, pack_command

#: Daily stats counters live five years, as Sidekiq's.
DAILY_STATS_TTL_SECONDS = 5 * 365 * 24 * 3600

#: How long a fetcher idles when every queue it serves is paused.
PAUSED_IDLE_SECONDS = 0.1

#: Basic fetch reads the paused queues at most this often, not once per job.
PAUSED_REFRESH_SECONDS = 1.0

#: The shortest block a queue waiter is asked for (Redis reads a 0 s timeout as "forever").
MIN_WAIT_SECONDS = 0.05

#: What marks a QueueWaiters name as a queue's wake list (jobsapp.priority), not its list.
WAKE_MARK = "\x00wake:"

#: What separates a queue's name from its partition in a QueueWaiters name (partitions above 0).
PARTITION_MARK = "\x00partition:"

#: The most packed BRPOP commands basic fetch keeps (one per queue order it has used).
MAX_PACKED_COMMANDS = 256

logger = logging.getLogger("jobsapp.fetch")


@dataclass(slots=True)
class UnitOfWork:
    """One fetched job: its raw bytes exactly as read (for LREM), the queue it came from and,
    on a partitioned cluster, the partition whose queue and in-flight list hold it."""

    raw: bytes
    queue: str
    partition: int = 0


@dataclass
class QueueOrder:
    """The queues a process serves, with Sidekiq's strict or weighted-random ordering."""

    weighted: list[str]  # each queue repeated by its weight
    strict: bool
    names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.names = list(dict.fromkeys(self.weighted))
        if not self.names:
            raise ValueError("at least one queue is needed")

    @classmethod
    def parse(cls, specs: list[str]) -> QueueOrder:
        """``["critical,3", "default"]`` -> weighted; ``["a", "b"]`` -> strict."""
        weighted: list[str] = []
        strict = True
        for spec in specs:
            name, _, weight_text = spec.partition(",")
            name = name.strip()
            if not name:
                raise ValueError(f"empty queue name in {spec!r}")
            weight = 1
            if weight_text:
                try:
                    weight = int(weight_text)
                except ValueError:
                    raise ValueError(f"queue weight in {spec!r} is not a whole number") from None
                if weight < 1:
                    raise ValueError(f"queue weight in {spec!r} must be at least 1")
                strict = False
            weighted.extend([name] * weight)
        return cls(weighted=weighted, strict=strict)

    def order(self, rng: random.Random) -> list[str]:
        """The queue order for one fetch."""
        if self.strict or len(self.names) == 1:
            return self.names
        shuffled = list(self.weighted)
        rng.shuffle(shuffled)
        return list(dict.fromkeys(shuffled))

    def describe(self) -> str:
        if self.strict:
            return ", ".join(self.names) + (" (strict order)" if len(self.names) > 1 else "")
        counts = {name: self.weighted.count(name) for name in self.names}
        return ", ".join(f"{name} (weight {weight})" for name, weight in counts.items())


class Fetch(Protocol):
    """What the manager needs from a fetch strategy, and what the strategy can do.

    The manager, the acker and the launcher ask these attributes, never the strategy's name:

    - ``reliable``: a fetched job stays in Redis (this process's in-flight list) until it is
      acknowledged, filed or put back, so a crash loses nothing. The launcher then claims a
      supervisor slot (recovering a dead predecessor's list), runs the orphan sweeper and the
      quarantine of recovered jobs, and the acker sends the finished jobs to remove from the list.
      Not reliable: a job lives only in memory while it runs, and an ack only counts it.
    - ``per_thread``: every processor thread calls ``take(1, ...)`` itself (blocking on its own
      connection, as Sidekiq's processors do); there is no fetcher thread and no shared buffer,
      so ``take`` must be safe to call from many threads at once. Otherwise one fetcher thread
      takes batches into the manager's buffer.
    """

    name: str
    reliable: bool
    per_thread: bool
    inflight_key: str
    #: whether a fetch of this process saw prioritised jobs in Redis (``jobsapp.priority``)
    prioritised_seen: bool
    inflight_keys: list[str]  # the in-flight list in each partition (``[inflight_key]`` outside a partitioned cluster)

    def take(self, count: int, *, block_seconds: float) -> list[UnitOfWork]: ...

    def acknowledge(
        self, units: list[UnitOfWork], jids: list[str], *, processed: int, failed: int, today: dt.date, token: str = ""
    ) -> Acknowledged: ...

    def requeue(self, units: list[UnitOfWork]) -> int:
        """Put ``units`` (oldest first) back at the front of their queues, the oldest in front."""
        ...

    def listed_in_flight(self) -> list[UnitOfWork]: ...

    def interrupt(self) -> None: ...

    def collect_pending(self) -> list[UnitOfWork]: ...


def _by_partition(units: list[UnitOfWork], jids: list[str] | None = None) -> dict[int, tuple[list[UnitOfWork], list[str]]]:
    """``units`` (and their ``jids``) grouped by partition, each group in their order."""
    groups: dict[int, tuple[list[UnitOfWork], list[str]]] = {}
    for index, unit in enumerate(units):
        group = groups.setdefault(unit.partition, ([], []))
        group[0].append(unit)
        if jids is not None:
            group[1].append(jids[index])
    return groups


def _ack(
    client: redis.Redis,
    inflight_key: str,
    units: list[UnitOfWork],
    jids: list[str],
    processed: int,
    failed: int,
    today: dt.date,
    *,
    token_key: str = "",
    token: str = "",
) -> Acknowledged:
    """``ack.lua`` once per partition the units came from (once outside a partitioned cluster):
    the units of partition ``p`` leave its in-flight list; the counters and the token go with
    partition 0's call (made even with no unit of its own), where the stats live."""
    if all(unit.partition == 0 for unit in units):
        return _ack_partition(client, inflight_key, units, jids, processed, failed, today, token_key=token_key, token=token)
    removed = 0
    for index, (group, group_jids) in sorted(_by_partition(units, jids).items()):
        if index == 0:
            continue
        with keys.using_partition(index):
            removed += _ack_partition(client, keys.in_partition(inflight_key, index), group, group_jids, 0, 0, today).removed
    home, home_jids = _by_partition(units, jids).get(0, ([], []))
    acknowledged = _ack_partition(client, inflight_key, home, home_jids, processed, failed, today, token_key=token_key, token=token)
    return Acknowledged(removed + acknowledged.removed, acknowledged.counted)


def _ack_partition(
    client: redis.Redis,
    inflight_key: str,
    units: list[UnitOfWork],
    jids: list[str],
    processed: int,
    failed: int,
    today: dt.date,
    *,
    token_key: str = "",
    token: str = "",
) -> Acknowledged:
    return scripts.ack(
        client,
        inflight_key=inflight_key,
        raws=[unit.raw for unit in units],
        jids=jids,
        processed=processed,
        failed=failed,
        today=today,
        daily_ttl_seconds=DAILY_STATS_TTL_SECONDS,
        token_key=token_key,
        token=token,
    )


def _requeue(client: redis.Redis, inflight_key: str, units: list[UnitOfWork]) -> int:
    """Put ``units`` (oldest first, as they were taken) back at the front of their queues in
    their order: each push lands in front of the one before, so the newest is pushed first and
    the oldest ends at the very front, taken first again. Each partition's units go back to
    its own queues (one ``requeue.lua`` per partition)."""
    if not units:
        return 0
    if all(unit.partition == 0 for unit in units):
        return scripts.requeue(client, inflight_key=inflight_key, jobs=[(unit.raw, unit.queue) for unit in reversed(units)])
    put_back = 0
    for index, (group, _) in sorted(_by_partition(units).items()):
        with keys.using_partition(index):
            jobs = [(unit.raw, unit.queue) for unit in reversed(group)]
            put_back += scripts.requeue(client, inflight_key=keys.in_partition(inflight_key, index), jobs=jobs)
    return put_back


class _Interruptible:
    """A blocked BLMOVE/BRPOP can be woken at quiet with CLIENT UNBLOCK (it returns as a timeout)."""

    client: redis.Redis
    blocking_client: redis.Redis
    _blocking_id: int | None
    _interrupted: threading.Event

    def _remember_blocking_connection(self) -> None:
        if self._blocking_id is None:
            self._blocking_id = connection.client_id(self.blocking_client, key=keys.QUEUES)

    def _idle(self, seconds: float) -> None:
        self._interrupted.clear()
        self._interrupted.wait(seconds)

    def interrupt(self) -> None:
        self._interrupted.set()
        if self._blocking_id is not None:
            try:
                connection.client_unblock(self.client, self._blocking_id, key=keys.QUEUES)
            except (redis.RedisError, OSError):  # nothing blocked, or Redis away: the block times out anyway
                pass


def waiter_name(queue_name: str, index: int) -> str:
    """The QueueWaiters name of ``queue_name``'s list in partition ``index``: the queue's name
    itself in partition 0."""
    return queue_name if index == 0 else f"{queue_name}{PARTITION_MARK}{index}"


def unit_of_waiter(name: str) -> tuple[str, int]:
    """The queue and partition of a QueueWaiters name (``waiter_name``)."""
    queue_name, mark, index = name.rpartition(PARTITION_MARK)
    return (queue_name, int(index)) if mark else (name, 0)


class QueueWaiters:
    """Idle waiting on several queues at once, without giving up reliable fetch.

    Once the process has seen prioritised jobs (``jobsapp.priority``), each queue also gets a
    waiter (``jobsapp.waiter-wake-<queue>``) that takes a token from the queue's wake list
    (``BLPOP``): a prioritised push wakes the fetcher, whose next ``fetch.lua`` takes the job.

    One thread (``jobsapp.waiter-<queue>``) and one connection per queue; each wait asks every
    waiter for one ``BLMOVE <queue> <in-flight> RIGHT LEFT <timeout>``. The first job to arrive
    wakes the fetcher, which unblocks the other waiters (``CLIENT UNBLOCK``): any job they had
    already moved is in flight (safe) and handed over by the next ``collect()``. On a
    partitioned cluster a queue has a waiter per partition (``waiter_name``), each blocking on
    that partition's list into that partition's in-flight list, on the master serving it.
    """

    def __init__(self, inflight_key: str, *, client: redis.Redis, make_blocking_client: Callable[[], redis.Redis]) -> None:
        self.inflight_key = inflight_key
        self.client = client
        self.make_blocking_client = make_blocking_client
        self._results: queue.SimpleQueue[tuple[str, bytes | None, bool]] = queue.SimpleQueue()  # (name, raw, woken)
        self._requests: dict[str, queue.SimpleQueue[float | None]] = {}
        self._connection_ids: dict[str, int] = {}
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self.closed = False  # set at quiet: a job a waiter still moves is put back at once

    def _waiter(self, name: str) -> queue.SimpleQueue[float | None]:
        requests = self._requests.get(name)
        if requests is None:
            requests = self._requests[name] = queue.SimpleQueue()
            ready = threading.Event()
            thread_name = f"jobsapp.waiter-{name.replace(WAKE_MARK, 'wake-').replace(PARTITION_MARK, '-partition-')}"
            threading.Thread(target=self._run, args=(name, requests, ready), name=thread_name, daemon=True).start()
            ready.wait(5.0)
        return requests

    def _key(self, name: str) -> tuple[str, str, int, str]:
        """What waiter ``name`` blocks on: (its key, the queue, the partition, the in-flight list)."""
        if name.startswith(WAKE_MARK):  # a queue's wake list (a token, not a job), not its list
            return keys.priority_wake(name[len(WAKE_MARK) :]), name[len(WAKE_MARK) :], 0, self.inflight_key
        queue_name, index = unit_of_waiter(name)
        with keys.using_partition(index):
            return keys.queue(queue_name), queue_name, index, keys.in_partition(self.inflight_key, index)

    def _run(self, name: str, requests: queue.SimpleQueue[float | None], ready: threading.Event) -> None:
        blocking = self.make_blocking_client()
        wake = name.startswith(WAKE_MARK)
        key, queue_name, index, inflight_key = self._key(name)
        try:
            self._connection_ids[name] = connection.client_id(blocking, key=key)
        except (redis.RedisError, OSError):  # Redis away: the BLMOVE below fails and reports it
            pass
        ready.set()
        while True:
            timeout = requests.get()
            if timeout is None:
                return
            raw: bytes | None = None
            woken = False
            try:
                if wake:  # losing a token costs one wait, nothing else
                    woken = blocking.blpop([key], timeout) is not None
                else:
                    reply = blocking.blmove(key, inflight_key, timeout, "RIGHT", "LEFT")  # type: ignore[arg-type]  # seconds may be fractional
                    raw = None if reply is None else as_bytes(reply)
                if name not in self._connection_ids:
                    self._connection_ids[name] = connection.client_id(blocking, key=key)
            except (redis.RedisError, OSError):  # reported as "nothing"; the fetcher's next Lua fetch sees the outage
                time.sleep(min(timeout, 0.5))
            if raw is not None and self.closed:
                # moved in flight after the process went quiet: nobody will collect it, so it
                # goes straight back to the front of its queue
                try:
                    _requeue(self.client, self.inflight_key, [UnitOfWork(raw, queue_name, index)])
                    raw = None
                except (redis.RedisError, OSError):  # kept for collect(); stop() puts it back
                    pass
            with self._lock:
                self._busy.discard(name)
            self._results.put((name, raw, woken))

    def collect(self) -> list[UnitOfWork]:
        units: list[UnitOfWork] = []
        while True:
            try:
                name, raw, _ = self._results.get_nowait()
            except queue.Empty:
                return units
            if raw is not None:
                units.append(UnitOfWork(raw, *unit_of_waiter(name)))

    def wait(self, names: list[str], timeout_seconds: float, *, wake: bool = False) -> list[UnitOfWork]:
        """Block up to ``timeout_seconds`` for a job of ``names`` (waiter names: ``waiter_name``);
        with ``wake``, a prioritised push to one of them ends the wait too (nothing returned: the
        caller fetches it; prioritised jobs are pushed to partition 0 only)."""
        if self.closed:  # quiet: nothing more is taken
            return []
        if wake:
            names = [*names, *[WAKE_MARK + name for name in names if PARTITION_MARK not in name]]
        end = time.monotonic() + timeout_seconds
        for name in names:
            self._ask(name, timeout_seconds)
        units: list[UnitOfWork] = []
        woken = False
        deadline = end + 1.0
        while not units and not woken and time.monotonic() < deadline:
            try:
                name, raw, woken = self._results.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if raw is not None:
                units.append(UnitOfWork(raw, *unit_of_waiter(name)))
            elif not woken and name in names and self._ask(name, end - time.monotonic()):
                continue  # it answered an unblock meant for an earlier wait: it waits again
            elif not self._busy:
                break
        if units or woken:
            self._unblock()
            units.extend(self.collect())
        return units

    def _ask(self, name: str, seconds: float) -> bool:
        """Have ``name``'s waiter block up to ``seconds`` (not after quiet, nor for less than
        ``MIN_WAIT_SECONDS``: a 0 s block would never end); whether it was asked (False: it is
        still blocked from before)."""
        if self.closed or seconds < MIN_WAIT_SECONDS:
            return False
        with self._lock:
            if name in self._busy:
                return False
            self._busy.add(name)
        self._waiter(name).put(seconds)
        return True

    def interrupt(self) -> None:
        """At quiet: unblock every waiter, and put back whatever one of them still moves."""
        self.closed = True
        self._unblock()

    def _unblock(self) -> None:
        with self._lock:
            busy = list(self._busy)
        for name in busy:
            connection_id = self._connection_ids.get(name)
            if connection_id is None:
                continue
            try:
                connection.client_unblock(self.client, connection_id, key=self._key(name)[0])
            except (redis.RedisError, OSError):  # it times out on its own
                pass


class ReliableFetch(_Interruptible):
    """Atomic moves into a per-process in-flight list; nothing is lost if the process dies.

    On a partitioned cluster (``keys.partition_count()`` above 1) each partition has its own
    in-flight list of this process, beside its queues: a fetch moves jobs of one partition into
    that partition's list. Each ``take`` asks the partitions in turn, starting after the one that
    last gave jobs, until one gives some (so a busy queue is drained from every partition at the
    same pace, in one round trip while they all hold jobs); when none does, it waits on every
    partition's queues at once (``QueueWaiters``), so an idle worker blocks instead of polling
    and a push to any partition wakes it within a millisecond."""

    name = "reliable"
    reliable = True
    per_thread = False

    def __init__(
        self,
        identity: str,
        queues: QueueOrder,
        *,
        client: redis.Redis,
        blocking_client: redis.Redis,
        rng: random.Random,
        make_blocking_client: Callable[[], redis.Redis],
    ) -> None:
        self.identity = identity
        self.queues = queues
        self.client = client
        self.blocking_client = blocking_client
        self.rng = rng
        self.inflight_key = keys.inflight(identity)
        self.partitions = keys.partition_count()
        #: this process's in-flight list in each partition
        self.inflight_keys = [keys.in_partition(self.inflight_key, index) for index in range(self.partitions)]
        self._turn = 0  # the partition the next take asks first
        self._unsure: set[int] = set()  # partitions whose last fetch failed (its reply may have been lost)
        self._blocking_id = None
        self._interrupted = threading.Event()
        self._waiters = QueueWaiters(self.inflight_key, client=client, make_blocking_client=make_blocking_client)
        # set once a fetch saw prioritised jobs: idle waits then watch the queues' wake lists too,
        # and the manager's buffer keeps its look-ahead short (dispatch.Occupancy.fetch_target)
        self.prioritised_seen = False

    def interrupt(self) -> None:
        super().interrupt()
        self._waiters.interrupt()

    def take(self, count: int, *, block_seconds: float) -> list[UnitOfWork]:
        """Up to ``count`` jobs; when none is ready, block up to ``block_seconds`` for one."""
        pending = self._waiters.collect()
        if pending:
            return pending
        order = self.queues.order(self.rng)
        if self.partitions > 1:
            return self._take_partitioned(order, count, block_seconds=block_seconds)
        fetched = scripts.fetch(self.client, inflight_key=self.inflight_key, queue_names=order, count=count)
        self.prioritised_seen = self.prioritised_seen or fetched.prioritised
        if fetched.jobs:
            return [UnitOfWork(raw, queue) for raw, queue in fetched.jobs]
        if block_seconds <= 0:
            return []
        ready = [name for name in order if name not in fetched.paused]
        if not ready:  # every queue is paused: idle briefly instead of spinning on Redis
            self._idle(min(block_seconds, PAUSED_IDLE_SECONDS))
            return []
        if len(ready) == 1 and not self.prioritised_seen:
            self._remember_blocking_connection()
            raw = self.blocking_client.blmove(keys.queue(ready[0]), self.inflight_key, block_seconds, "RIGHT", "LEFT")  # type: ignore[arg-type]  # seconds may be fractional
            return [UnitOfWork(as_bytes(raw), ready[0])] if raw is not None else []
        # BLMOVE waits on one list: with several queues, one waiter per queue blocks at once,
        # so a push to any of them wakes the fetcher within a millisecond.
        return self._waiters.wait(ready, block_seconds, wake=self.prioritised_seen)

    def _take_partitioned(self, order: list[str], count: int, *, block_seconds: float) -> list[UnitOfWork]:
        """``take`` on a partitioned cluster: one ``fetch.lua`` per partition, in turn, until one
        gives jobs; else one waiter per queue and partition blocks.

        A partition whose master does not answer (being replaced after a failure, say) is passed
        over while another gives jobs, so the others' jobs keep running; the Redis error is raised
        only when no partition gave any. That partition's failed fetch may have moved jobs into
        its in-flight list with its reply lost: when it answers again, this take raises instead
        of returning, and the caller's ordinary path after a failed fetch reconciles the
        in-flight lists (every job there that the process does not hold goes back to its queue,
        the ones just fetched too)."""
        paused: frozenset[str] = frozenset()
        failure: BaseException | None = None
        for step in range(self.partitions):
            index = (self._turn + step) % self.partitions
            try:
                with keys.using_partition(index):
                    fetched = scripts.fetch(self.client, inflight_key=self.inflight_keys[index], queue_names=order, count=count)
            except connection.REDIS_ERRORS as exc:
                failure = failure or exc
                self._unsure.add(index)
                continue
            if index in self._unsure:
                self._unsure.discard(index)
                raise redis.ConnectionError(f"partition {index} answers again after a failed fetch: reconciling the in-flight lists")
            self.prioritised_seen = self.prioritised_seen or fetched.prioritised
            if index == 0:
                paused = fetched.paused  # pausing writes every partition's set; partition 0's is the one read
            if fetched.jobs:
                self._turn = index + 1
                return [UnitOfWork(raw, queue, index) for raw, queue in fetched.jobs]
        if failure is not None:
            self._turn += 1  # the next take starts past it
            raise failure
        if block_seconds <= 0:
            return []
        ready = [name for name in order if name not in paused]
        if not ready:  # every queue is paused: idle briefly instead of spinning on Redis
            self._idle(min(block_seconds, PAUSED_IDLE_SECONDS))
            return []
        names = [waiter_name(name, index) for index in range(self.partitions) for name in ready]
        return self._waiters.wait(names, block_seconds, wake=self.prioritised_seen)

    def collect_pending(self) -> list[UnitOfWork]:
        """Jobs the queue waiters moved in flight but did not hand over yet."""
        return self._waiters.collect()

    def acknowledge(
        self, units: list[UnitOfWork], jids: list[str], *, processed: int, failed: int, today: dt.date, token: str = ""
    ) -> Acknowledged:
        """Ack a batch; a batch resent after a lost reply carries the same ``token`` and is not
        counted twice."""
        return _ack(
            self.client, self.inflight_key, units, jids, processed, failed, today, token_key=keys.last_ack(self.identity), token=token
        )

    def requeue(self, units: list[UnitOfWork]) -> int:
        return _requeue(self.client, self.inflight_key, units)

    def listed_in_flight(self) -> list[UnitOfWork]:
        """Every job in this process's in-flight lists, newest first in each (for reconciling
        after a lost reply), with its partition (its queue is left for the caller to read)."""
        listed: list[UnitOfWork] = []
        for index, inflight_key in enumerate(self.inflight_keys):
            listed.extend(UnitOfWork(as_bytes(raw), "", index) for raw in self.client.lrange(inflight_key, 0, -1))
        return listed


class BasicFetch:
    """Sidekiq's BRPOP fetch: each processor thread blocks in its own ``BRPOP`` over its queues
    (strict or weighted-random order per call, as the QueueOrder says) on a connection of its
    own, runs the job, and takes the next. That connection is a ``PopConnection``
    (``pop_connection``): a BRPOP is one send of bytes packed once per queue order and
    one blocking read, without the two ``poll`` calls and the client layers of redis-py's path.
    A job lives only in memory while it runs (lost on SIGKILL); there is nothing in flight in
    Redis to acknowledge, so an ack only counts it.

    Paused queues are read at most once per ``PAUSED_REFRESH_SECONDS`` for all threads, not once
    per job. ``interrupt`` (quiet) unblocks every waiting ``BRPOP`` (``CLIENT UNBLOCK``); a job a
    thread popped at that moment is put back at the front of its queue by the manager.
    """

    name = "basic"
    reliable = False
    per_thread = True
    prioritised_seen = False  # BRPOP reads the lists only
    inflight_key = ""
    inflight_keys: list[str] = []

    def __init__(
        self,
        queues: QueueOrder,
        *,
        client: redis.Redis,
        make_blocking_client: Callable[[], redis.Redis],
        rng: random.Random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queues = queues
        self.client = client
        self.make_blocking_client = make_blocking_client
        self.rng = rng
        self.clock = clock
        self._interrupted = threading.Event()  # set once, at quiet
        self._local = threading.local()  # each thread's blocking client
        self._lock = threading.Lock()
        self._blocking_ids: list[int] = []  # every thread's blocking connection, for CLIENT UNBLOCK
        self._paused: frozenset[str] = frozenset()
        self._paused_read_at: float | None = None
        self._reported: set[str] = set()  # the queues whose prioritised jobs were reported
        self._keys = {name: keys.queue(name) for name in queues.names}
        self._names = {key.encode("utf-8"): name for name, key in self._keys.items()}
        self._commands: dict[tuple[tuple[str, ...], float], bytes] = {}

    def _paused_queues(self) -> frozenset[str]:
        """The paused queues, read at most once per ``PAUSED_REFRESH_SECONDS`` (not a round trip
        per job: a pause takes effect within a second, plus a BRPOP already waiting)."""
        read_at = self._paused_read_at
        if read_at is not None and self.clock() - read_at < PAUSED_REFRESH_SECONDS:
            return self._paused
        with self._lock:  # one thread reads; the others wait for its answer (once a second)
            now = self.clock()
            if self._paused_read_at is None or now - self._paused_read_at >= PAUSED_REFRESH_SECONDS:
                pipe = self.client.pipeline(transaction=False)
                pipe.smembers(keys.PAUSED)
                pipe.smembers(keys.PRIORITISED)
                paused, prioritised = pipe.execute()
                self._paused = frozenset(as_text(name) for name in paused)
                self._paused_read_at = now
                self._report_prioritised({as_text(name) for name in prioritised})
            return self._paused

    def _report_prioritised(self, prioritised: set[str]) -> None:
        """BRPOP reads the lists only: a served queue holding prioritised jobs (jobsapp.priority)
        is said once per queue, as an ERROR, since this worker will not run them."""
        for name in sorted(prioritised & set(self.queues.names) - self._reported):
            self._reported.add(name)
            logger.error(
                "queue %s holds prioritised jobs, which basic fetch does not take: run its workers with reliable fetch (the default)",
                name,
            )

    def _pop_connection(self) -> PopConnection:
        """This thread's own connection, held for good (``pop_connection``: a BRPOP is
        one send and one read on it, without a pool check-out or the client's layers)."""
        pop: PopConnection | None = getattr(self._local, "pop", None)
        if pop is None:
            pop = PopConnection(connection.node_client(self.make_blocking_client(), keys.QUEUES))
            self._local.pop = pop
            with self._lock:
                self._blocking_ids.append(pop.id)
        return pop

    def _forget_pop_connection(self) -> None:
        """After an error on it: closed; the thread's next take opens another (new id)."""
        pop: PopConnection | None = getattr(self._local, "pop", None)
        if pop is None:
            return
        self._local.pop = None
        with self._lock:
            if pop.id in self._blocking_ids:
                self._blocking_ids.remove(pop.id)
        pop.close()

    def _command(self, queue_keys: tuple[str, ...], block_seconds: float) -> bytes:
        """The packed ``BRPOP`` for this queue order, built once per order (a weighted order has
        at most one per permutation; past ``MAX_PACKED_COMMANDS`` they are built per call)."""
        command = self._commands.get((queue_keys, block_seconds))
        if command is None:
            command = pack_command("BRPOP", *queue_keys, repr(float(block_seconds)))
            if len(self._commands) < MAX_PACKED_COMMANDS:
                self._commands[(queue_keys, block_seconds)] = command
        return command

    def _brpop(self, command: bytes) -> list[bytes] | None:
        pop = self._pop_connection()
        try:
            return pop.brpop(command)  # [key, raw] or None
        except BaseException:  # broken, timed out, an error reply, or interrupted mid-reply: nothing popped, or the job lost (basic fetch)
            self._forget_pop_connection()
            raise

    def take(self, count: int, *, block_seconds: float) -> list[UnitOfWork]:
        """One job for the calling thread, blocking up to ``block_seconds`` for it (``count`` is
        ignored: a thread takes only the job it runs next)."""
        if self._interrupted.is_set():
            return []
        paused = self._paused_queues()
        order = self.queues.order(self.rng)
        if paused:
            ready = tuple(self._keys[name] for name in order if name not in paused)
        else:
            ready = tuple(map(self._keys.__getitem__, order))
        if not ready:  # every queue is paused: idle briefly instead of spinning on Redis
            self._interrupted.wait(min(block_seconds, PAUSED_IDLE_SECONDS))
            return []
        if block_seconds <= 0:
            return []
        popped = self._brpop(self._command(ready, block_seconds))
        if popped is None:  # timed out, or unblocked at quiet
            return []
        key, raw = popped
        name = self._names.get(key)
        return [UnitOfWork(raw, name if name is not None else keys.queue_name(as_text(key)))]

    def interrupt(self) -> None:
        """At quiet: no thread blocks again, and those waiting in BRPOP return at once."""
        self._interrupted.set()
        with self._lock:
            blocking_ids = list(self._blocking_ids)
        for connection_id in blocking_ids:
            try:
                connection.client_unblock(self.client, connection_id, key=keys.QUEUES)
            except (redis.RedisError, OSError):  # nothing blocked, or Redis away: the block times out anyway
                pass

    def acknowledge(
        self, units: list[UnitOfWork], jids: list[str], *, processed: int, failed: int, today: dt.date, token: str = ""
    ) -> Acknowledged:
        return _ack(self.client, "", [], [], processed, failed, today)

    def listed_in_flight(self) -> list[UnitOfWork]:
        return []  # nothing is in flight in Redis with basic fetch

    def collect_pending(self) -> list[UnitOfWork]:
        return []

    def requeue(self, units: list[UnitOfWork]) -> int:
        return _requeue(self.client, "", units)


#: ``--fetch`` / ``JOBSAPP["FETCH"]`` values and their strategies.
STRATEGIES: dict[str, type[ReliableFetch] | type[BasicFetch]] = {"reliable": ReliableFetch, "basic": BasicFetch}


def strategy(name: str) -> type[ReliableFetch] | type[BasicFetch]:
    """The fetch strategy class called ``name``; its capabilities (``reliable``, ``per_thread``)
    are class attributes, known before a process builds it."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown fetch strategy {name!r}: use one of {', '.join(STRATEGIES)}") from None


def build(
    name: str,
    identity: str,
    queues: QueueOrder,
    *,
    client: redis.Redis,
    rng: random.Random,
    make_blocking_client: Callable[[], redis.Redis],
) -> ReliableFetch | BasicFetch:
    """The fetch strategy called ``name`` for the process ``identity`` (nothing is sent to Redis
    yet). ``make_blocking_client`` makes a client with its own connection for a thread that
    blocks (its socket timeout longer than the block)."""
    if strategy(name) is BasicFetch and keys.partition_count() > 1:
        raise ValueError(
            "basic fetch cannot serve a partitioned cluster (CLUSTER_PARTITIONS above 1): one BRPOP cannot wait on "
            "lists of several hash slots; use reliable fetch (the default)"
        )
    if strategy(name) is ReliableFetch:
        return ReliableFetch(
            identity, queues, client=client, blocking_client=make_blocking_client(), rng=rng, make_blocking_client=make_blocking_client
        )
    return BasicFetch(queues, client=client, make_blocking_client=make_blocking_client, rng=rng)
