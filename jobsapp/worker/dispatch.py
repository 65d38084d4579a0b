"""How one process's processor threads get their next job: one dispatcher per fetch mode.

The manager (manager.py) runs the threads and settles what each job became; a dispatcher hands
each processor thread its next unit of work, registered in the process's ``Occupancy`` (the
running set, under the one lock the manager and its dispatcher share):

- ``BufferedDispatcher`` (reliable fetch, whose fetches take batches). Thread
  ``jobsapp.fetcher`` keeps a small local buffer filled: one ``fetch.lua`` round trip brings up
  to a batch of jobs (already safe in the in-flight list). When every queue is empty it does not
  block itself: it asks an idle processor thread to block in the fetch (``BLMOVE``) and waits.
  That thread runs the job it receives (Sidekiq's processors do the same), so a pushed job starts
  without a hand-off between threads; it then wakes the fetcher to fetch what follows. Only an
  idle thread blocks, so fair fetch holds; a blocking fetch that fails is reported to the
  fetcher, which backs off and reconciles the in-flight list as after its own failures. Fair
  fetch: the buffer holds at most one job per idle thread plus a look-ahead, the jobs the threads
  finish during one fetch round trip (moving averages of both). Long jobs make the look-ahead 0,
  so a process never holds a fetched job that none of its threads can start now and long jobs
  spread over every process and host with a free thread (Sidekiq's rule); short jobs make it a
  full batch, so many jobs still come in one round trip. Once the process has seen
  prioritised jobs, the look-ahead holds at most ``PRIORITY_LOOKAHEAD_SECONDS`` of its threads'
  work, so a prioritised push waits for a free thread, not for the jobs fetched ahead of it
  (``jobsapp.priority``). A fetch wakes one waiting thread; a
  thread that takes a unit and leaves more wakes the next, so a thread that finishes its job
  meanwhile takes one without any wake-up.
- ``PerThreadDispatcher`` (``Fetch.per_thread``: basic fetch, Sidekiq's): no fetcher and no
  buffer; each processor thread blocks in its own fetch for the one job it runs next, so a
  process never holds a job it cannot start (while the latest job was async and the async lane
  is full, the threads wait for a free slot before fetching).

Both count the async lane: its running jobs are in the running set under pseudo thread ids; fair
fetch counts the processor threads and, while the latest job taken was async, the lane's free
slots too. A job a dispatcher took as the process went quiet goes back to the front of its queue
(the manager's requeue); a Redis error in a fetch leaves the jobs in their queues (or in flight,
reconciled after the outage) and is waited out through one ``Backoff``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import Protocol

from .. import faults
from ..backoff import Backoff
from ..conf import jobs_settings
from ..connection import REDIS_ERRORS
from ..outcomes import RequeueReason
from ..payload import decode
from .aio import AsyncLane
from .fetch import Fetch, UnitOfWork

logger = logging.getLogger("jobsapp.manager")

#: The look-ahead covers the jobs the processor threads finish during this many fetch round
#: trips. The buffer is refilled at half its target, so this also sets how many jobs come in a
#: fetch. With 2, jobs of about a millisecond came 12 to a fetch and a third of them found the
#: buffer empty (their thread waited for the fetch and was woken); with 4, one in 12 to 20 did
#: (bench.profile_drain, 2x10, one plain redis-py INCR per job: 18,700 against 13,300 jobs/s,
#: medians of 4 alternating rounds).
LOOKAHEAD_ROUND_TRIPS = 4

#: Once the process has seen prioritised jobs (``jobsapp.priority``), the look-ahead holds at most
#: this much of its threads' work (jobs of a second's average on 10 threads: none; of a
#: millisecond: 50). A prioritised job pushed while the threads are busy waits behind the
#: look-ahead the buffer holds: without this bound, round trips measured slow (a Redis busy
#: with a bulk push, a GIL held by the jobs) made it several long jobs, and a job of priority
#: 50 pushed behind 10,000 jobs of 50 ms started 227 ms later instead of within one run.
PRIORITY_LOOKAHEAD_SECONDS = 0.005

#: At stop, how long the idle processor threads of a per-thread fetch get to leave their fetch.
IDLE_THREAD_JOIN_SECONDS = 0.5

#: Puts units back at the front of their queues, telling middleware why (the manager's).
Requeue = Callable[[list[UnitOfWork], RequeueReason], None]


def queue_of(raw: bytes) -> str:
    """The queue a job read from an in-flight list goes back to: its payload's ``queue``."""
    try:
        queue = decode(raw).get("queue")
    except ValueError:  # malformed: back to the default queue, where a worker files it as dead
        queue = None
    return queue if isinstance(queue, str) and queue else str(jobs_settings.DEFAULT_QUEUE)


def moving_average(average: float | None, sample: float) -> float:
    """Exponentially weighted (the newest sample weighs 1/10)."""
    return sample if average is None else average + (sample - average) / 10


@dataclass(slots=True)
class Running:
    unit: UnitOfWork
    run_at: float  # epoch seconds, for the busy list


class Occupancy:
    """Who runs what in one process: the running set and what fair fetch reads from it, under the
    lock the manager and its dispatcher share (``work_ready``: a unit or a blocking turn is there
    for a processor thread; ``room``: a thread is free, the fetcher may fetch)."""

    def __init__(self, *, concurrency: int, capacity: int, async_lane: AsyncLane | None, async_lately: bool) -> None:
        self.concurrency = concurrency
        self.capacity = capacity  # the most jobs one fetch takes, and the buffer holds
        self.async_lane = async_lane
        self.lock = threading.Lock()
        self.work_ready = threading.Condition(self.lock)
        self.room = threading.Condition(self.lock)
        self.quiet = threading.Event()
        self.running: dict[int, Running] = {}  # thread id (or an async job's pseudo id) -> its job
        self.async_running = 0  # entries of running that are async jobs in the lane
        # whether the latest job this process took was async (it needs a lane slot, not a thread;
        # see fetch_target); at start, whether any registered job class is
        self.async_lately = async_lately
        self.job_seconds: float | None = None  # moving average of the processor threads' jobs

    def fetch_target(self, fetch_seconds: float | None, *, prioritised: bool = False) -> int:
        """Under the lock: how many fetched, unstarted jobs this process may hold now: one per
        idle thread, plus the jobs its threads finish during ``LOOKAHEAD_ROUND_TRIPS`` fetch
        round trips (``fetch_seconds``; 0 while jobs outlast them), at most a batch; with
        ``prioritised`` (the process has seen prioritised jobs), no more than the jobs they finish
        in ``PRIORITY_LOOKAHEAD_SECONDS``. While the latest job taken was async, no more than the
        async lane's free slots either: a process does not hold async jobs it cannot start (they
        spread over the processes with free slots)."""
        idle = max(0, self.concurrency - (len(self.running) - self.async_running))
        if self.async_lately and self.async_lane is not None:  # any job a thread holds may be async: it needs a slot
            return min(self.capacity, idle, self.async_lane.concurrency - len(self.running))
        lookahead = 0
        if self.job_seconds is not None and fetch_seconds is not None:
            ahead_seconds = LOOKAHEAD_ROUND_TRIPS * fetch_seconds
            if prioritised:
                ahead_seconds = min(ahead_seconds, PRIORITY_LOOKAHEAD_SECONDS)
            lookahead = int(ahead_seconds * self.concurrency / max(self.job_seconds, 1e-6))
        return min(self.capacity, idle + lookahead)


class Dispatcher(Protocol):
    """What the manager asks of a fetch mode's dispatcher."""

    def start(self) -> None:
        """Start the dispatcher's own threads, if it has any."""

    def next_unit(self, ident: int, backoff: Backoff) -> UnitOfWork | None:
        """The next job of processor thread ``ident``, registered as running; None once quiet."""

    def quiet_locked(self) -> list[UnitOfWork]:
        """Under the lock, as the process goes quiet: the units held but not started."""

    def room_freed_locked(self) -> None:
        """Under the lock: a thread became free (its job ended, or went to the async lane)."""

    def held_locked(self) -> list[UnitOfWork]:
        """Under the lock: the units held but not started (for reconciling the in-flight list)."""

    def stop_fetching(self, deadline: float, threads: list[threading.Thread]) -> None:
        """At stop, before the running jobs are put back: end the fetches under way."""


class BufferedDispatcher:
    """Reliable fetch: a fetcher thread and a buffer (see the module header)."""

    def __init__(
        self,
        occupancy: Occupancy,
        *,
        fetch: Fetch,
        block_seconds: float,
        requeue: Requeue,
        acknowledging: Callable[[], list[UnitOfWork]],
    ) -> None:
        self.occupancy = occupancy
        self.fetch = fetch
        self.block_seconds = block_seconds
        self.requeue = requeue
        self.acknowledging = acknowledging  # finished jobs not yet acknowledged (the acker's)
        self._fetch_seconds: float | None = None  # moving average of a fetch's round trip
        self._buffer: deque[UnitOfWork] = deque()
        self._processors_done = False
        # every queue was empty: an idle processor thread should block in the fetch for the next
        # job and run it itself (see _block_for_unit); the fetcher waits until it has one
        self._blocking_wanted = False
        self._blocking = False  # a processor thread is blocked in the fetch
        self._blocking_error: tuple[BaseException, bool] | None = None  # its fetch failed (error, unexpected)
        self._blocking_answered = False  # a blocking fetch got a reply since the fetcher last looked (ends an outage)
        self._fetcher: threading.Thread | None = None
        # under the lock: who waits now; a notify, and the fair fetch target it rests on, are
        # skipped when nobody waits (a busy process takes and frees a thread every job)
        self._fetcher_waiting = False
        self._threads_waiting = 0

    def start(self) -> None:
        self._fetcher = threading.Thread(target=self._fetch_loop, name="jobsapp.fetcher", daemon=True)
        self._fetcher.start()

    def quiet_locked(self) -> list[UnitOfWork]:
        unstarted = list(self._buffer)
        self._buffer.clear()
        self._processors_done = True
        return unstarted

    def room_freed_locked(self) -> None:
        # a thread is free: the fetcher may take a job for it (when it is not waiting, it looks
        # at the buffer again before it waits)
        if self._fetcher_waiting and self._below_low_water(self._target()):
            self.occupancy.room.notify()

    def held_locked(self) -> list[UnitOfWork]:
        return list(self._buffer)

    def stop_fetching(self, deadline: float, threads: list[threading.Thread]) -> None:
        if self._fetcher is not None:
            self._fetcher.join(max(0.0, min(deadline - time.monotonic(), self.block_seconds + 1)))

    def _target(self) -> int:
        return self.occupancy.fetch_target(self._fetch_seconds, prioritised=self.fetch.prioritised_seen)

    def _below_low_water(self, target: int) -> bool:
        """Under the lock: whether the fetcher should fetch now (the buffer is down to half its
        target; it is woken only then, not once per job)."""
        return len(self._buffer) <= target - max(1, target // 2)

    # --- the fetcher ------------------------------------------------------------------

    def _fetch_loop(self) -> None:
        occupancy = self.occupancy
        backoff = Backoff("fetch", logger=logger)
        # the outage was seen by a blocking fetch (it may refuse while fetch.lua still answers an
        # empty queue, as BLMOVE does when Redis is out of memory): it ends when one answers
        blocking_outage = False
        while not occupancy.quiet.is_set():
            failure, answered, want = self._wait_for_room()
            if occupancy.quiet.is_set():
                break
            if failure is not None:  # a processor thread's blocking fetch failed: wait, then fetch and reconcile
                blocking_outage = True
                backoff.pause(failure[0], occupancy.quiet, unexpected=failure[1])
                continue
            if answered and backoff.in_outage and blocking_outage:  # Redis answers the blocking fetch again
                backoff.succeeded()
                blocking_outage = False
            started = time.monotonic()
            try:
                units = self.fetch.take(want, block_seconds=0)
            except REDIS_ERRORS as exc:  # away, or refusing (READONLY after a failover, OOM): wait it out
                backoff.pause(exc, occupancy.quiet)
                continue
            except Exception as exc:  # noqa: BLE001  # an engine bug: the fetcher must outlive it (jobs stay safe in their queues)
                backoff.pause(exc, occupancy.quiet, unexpected=True)
                continue
            if backoff.in_outage:
                if units or not blocking_outage:
                    backoff.succeeded()
                    blocking_outage = False
                # a failed fetch may have run after all (its reply lost to a timeout): its jobs
                # would sit in our in-flight list, run by no one, until this process restarts
                units.extend(self.fetch.collect_pending())
                units = self._reconcile(units)
            if not units:  # every queue is empty: an idle processor thread blocks for the next job
                with occupancy.lock:
                    if not occupancy.quiet.is_set():
                        self._blocking_wanted = True
                        occupancy.work_ready.notify()
                continue
            self._fetch_seconds = moving_average(self._fetch_seconds, time.monotonic() - started)
            if faults.POINT:
                faults.reach("after_fetch")
            self._fill(units)

    def _wait_for_room(self) -> tuple[tuple[BaseException, bool] | None, bool, int]:
        """Wait until the buffer is below its low water mark (or a blocking fetch failed, or the
        process went quiet); the blocking fetch's failure, whether one answered since, and how
        many jobs to fetch."""
        occupancy = self.occupancy
        with occupancy.lock:
            target = 0
            while not occupancy.quiet.is_set():
                if self._blocking_error is not None:
                    break
                if not self._blocking_wanted:  # while a processor thread blocks for a job, nothing to fetch
                    target = self._target()
                    if self._below_low_water(target):
                        break
                self._fetcher_waiting = True
                try:
                    occupancy.room.wait(1.0)
                finally:
                    self._fetcher_waiting = False
            failure, self._blocking_error = self._blocking_error, None
            answered, self._blocking_answered = self._blocking_answered, False
            # the wait ended below the low water mark with a fresh target, or with a failure
            return failure, answered, 0 if failure is not None else target - len(self._buffer)

    def _fill(self, units: list[UnitOfWork]) -> None:
        """Buffer the fetched ``units`` and wake one waiting thread; it wakes the next only if a
        unit is still left when it takes its own (a thread finishing its job meanwhile takes one
        without a wake). Quieted while the fetch was in flight: they go back."""
        with self.occupancy.lock:
            if not self.occupancy.quiet.is_set():
                self._buffer.extend(units)
                self.occupancy.work_ready.notify()
                return
        self.requeue(units, RequeueReason.QUIET)

    def _reconcile(self, fetched: list[UnitOfWork]) -> list[UnitOfWork]:
        """After a fetch whose outcome is unknown: every job in this process's in-flight list
        that it does not hold (buffered, running, waiting for or in an ack, or just ``fetched``)
        was moved by a fetch whose reply was lost. Those go back to the front of their queues
        (``requeue.lua``, guarded by LREM: one finished and acknowledged meanwhile is not put
        back). Returns ``fetched``; on a Redis error nothing is changed (tried again after the
        next failed fetch, or the list is recovered when this process stops)."""
        try:
            listed = self.fetch.listed_in_flight()
        except REDIS_ERRORS as exc:
            logger.warning("fetch: could not reconcile the in-flight list (%s)", exc)
            return fetched
        occupancy = self.occupancy
        with occupancy.lock:  # a job is recorded with the acker before it leaves the running set
            running = (running.unit for running in occupancy.running.values())
            held = Counter(unit.raw for unit in chain(self._buffer, running, self.acknowledging(), fetched))
        strays: list[UnitOfWork] = []
        for unit in reversed(listed):  # each list holds the newest first; put back oldest first
            if held[unit.raw] > 0:
                held[unit.raw] -= 1
            else:
                strays.append(UnitOfWork(unit.raw, queue_of(unit.raw), unit.partition))
        if strays:
            logger.warning("fetch: %d jobs moved in flight by a fetch whose reply was lost go back to their queues", len(strays))
            self.requeue(strays, RequeueReason.RECONCILE)
        return fetched

    # --- the processor threads --------------------------------------------------------

    def next_unit(self, ident: int, backoff: Backoff) -> UnitOfWork | None:
        """The next job for this processor thread from the shared buffer or, when every queue was
        empty, from its own blocking fetch; registered as running. None once quiet."""
        occupancy = self.occupancy
        while True:
            with occupancy.lock:
                while not self._buffer and not self._processors_done:
                    if self._blocking_wanted and not self._blocking:
                        self._blocking = True  # this thread blocks for the next job and runs it
                        break
                    self._threads_waiting += 1
                    try:
                        occupancy.work_ready.wait()
                    finally:
                        self._threads_waiting -= 1
                else:
                    if not self._buffer:
                        return None
                    unit = self._buffer.popleft()
                    if self._buffer and self._threads_waiting:
                        occupancy.work_ready.notify()
                    occupancy.running[ident] = Running(unit, time.time())
                    self.room_freed_locked()  # the buffer shrank: the fetcher may fetch
                    return unit
            blocked_for = self._block_for_unit(ident)
            if blocked_for is not None:
                return blocked_for

    def _block_for_unit(self, ident: int) -> UnitOfWork | None:
        """Every queue was empty: block in the fetch (``BLMOVE``, into the in-flight list) for
        the next job and run it in this thread, with no hand-off between the thread that
        receives a push and the one that runs it (Sidekiq's processors do the same). Jobs that
        come with it go to the buffer; the fetcher is woken to fetch what follows. A failed
        fetch is left to the fetcher (it backs off and reconciles the in-flight list); None
        then, and once quiet."""
        occupancy = self.occupancy
        units: list[UnitOfWork] = []
        failure: tuple[BaseException, bool] | None = None
        try:
            while not units and not occupancy.quiet.is_set():
                units = self.fetch.take(1, block_seconds=self.block_seconds)
                self._blocking_answered = True
        except REDIS_ERRORS as exc:  # nothing taken that we know of: the fetcher waits it out and reconciles
            failure = (exc, False)
        except Exception as exc:  # noqa: BLE001  # an engine bug: the thread must outlive it (the jobs stay in their queues or in flight)
            failure = (exc, True)
        if units and faults.POINT:
            faults.reach("after_fetch")
        with occupancy.lock:
            self._blocking = False
            self._blocking_wanted = False
            self._blocking_error = failure
            occupancy.room.notify()  # the fetcher: fetch what follows this job (or back off)
            if units and not occupancy.quiet.is_set():
                unit = units[0]
                if len(units) > 1:  # other queues' waiters moved jobs too
                    self._buffer.extend(units[1:])
                    occupancy.work_ready.notify()
                occupancy.running[ident] = Running(unit, time.time())
                return unit
        if units:  # quieted while blocked: back to the front of their queues
            self.requeue(units, RequeueReason.QUIET)
        return None


class PerThreadDispatcher:
    """Basic fetch: each processor thread fetches its own next job (see the module header)."""

    def __init__(self, occupancy: Occupancy, *, fetch: Fetch, block_seconds: float, requeue: Requeue) -> None:
        self.occupancy = occupancy
        self.fetch = fetch
        self.block_seconds = block_seconds
        self.requeue = requeue
        self._reserved_fetches = 0  # fetches under way into a free lane slot

    def start(self) -> None:
        """No thread of its own: the processor threads fetch."""

    def quiet_locked(self) -> list[UnitOfWork]:
        return []

    def room_freed_locked(self) -> None:
        if self.occupancy.fetch_target(None) >= 1:
            self.occupancy.room.notify()  # a thread waiting for a free lane slot may fetch

    def held_locked(self) -> list[UnitOfWork]:
        return []

    def next_unit(self, ident: int, backoff: Backoff) -> UnitOfWork | None:
        """Block in this thread's own fetch for its next job, registered as running; None once
        quiet."""
        occupancy = self.occupancy
        while not occupancy.quiet.is_set():
            reserved = occupancy.async_lately  # the latest job was async: fetch only into a free lane slot, one fetch per slot
            if reserved:
                with occupancy.lock:
                    if self._reserved_fetches >= occupancy.fetch_target(None):
                        occupancy.room.wait(0.5)
                        continue
                    self._reserved_fetches += 1
            units: list[UnitOfWork] = []
            try:
                units = self.fetch.take(1, block_seconds=self.block_seconds)
            except REDIS_ERRORS as exc:  # away, or refusing: nothing was taken; wait it out (one warning per thread and outage)
                backoff.pause(exc, occupancy.quiet)
            except Exception as exc:  # noqa: BLE001  # an engine bug: the thread must outlive it (a job popped and lost is basic fetch's risk)
                backoff.pause(exc, occupancy.quiet, unexpected=True)
            else:
                backoff.succeeded()
            with occupancy.lock:
                if reserved:  # released as the job is registered: it counts as running from here on
                    self._reserved_fetches -= 1
                if units and not occupancy.quiet.is_set():
                    occupancy.running[ident] = Running(units[0], time.time())
                    return units[0]
            if units:
                self.requeue(units, RequeueReason.QUIET)  # popped as the process went quiet: back to the front
        return None

    def stop_fetching(self, deadline: float, threads: list[threading.Thread]) -> None:
        """Before the running jobs are put back: a thread that passed its quiet check just as
        quiet() unblocked the others may have sent its BRPOP after that; it has reached Redis by
        now, so unblock again and let the idle threads return (one of them could otherwise pop a
        job put back below)."""
        self.fetch.interrupt()
        with self.occupancy.lock:
            running = set(self.occupancy.running)
        give_up_at = time.monotonic() + IDLE_THREAD_JOIN_SECONDS
        for thread in threads:
            if thread.ident not in running:
                thread.join(max(0.0, give_up_at - time.monotonic()))
