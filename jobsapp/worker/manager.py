"""The manager: one process's processor threads, its fetcher and its acker.

Threads (all daemons, named), for a fetch strategy that takes batches (reliable fetch):
- ``jobsapp.fetcher`` keeps a small local buffer filled: one ``fetch.lua`` round trip brings up
  to a batch of jobs (already safe in the in-flight list). When every queue is empty it does not
  block itself: it asks an idle processor thread to block in the fetch (``BLMOVE``) and waits.
  That thread runs the job it receives (Sidekiq's processors do the same), so a pushed job
  starts without a hand-off between threads; it then wakes the fetcher to fetch what follows.
  Only an idle thread blocks, so fair fetch holds; a blocking fetch that fails is reported to
  the fetcher, which backs off and reconciles the in-flight list as after its own failures.
  Fair fetch: the buffer holds at most one job per idle thread plus a look-ahead, the jobs the
  threads finish during one fetch round trip (moving averages of both). Long jobs make the
  look-ahead 0, so a process never holds a fetched job that none of its threads can start now
  and long jobs spread over every process and host with a free thread (Sidekiq's rule); short
  jobs make it a full batch, so many jobs still come in one round trip.
- ``jobsapp.processor-<n>`` (``concurrency`` of them) take units from the buffer and run them.
  A fetch wakes one waiting thread; a thread that takes a unit and leaves more wakes the next,
  so a thread that finishes its job meanwhile takes one without any wake-up.
  An async job (``async def perform``) is handed to the async lane (``aio``) once it has
  a free slot, and the thread goes back for the next unit; while the lane is full the thread
  waits with its unit (counted busy, so the fetcher takes no more). The lane's running jobs are
  in the running set (the busy list) under pseudo thread ids, and are recorded and acknowledged
  like any other; fair fetch counts the processor threads, and while the latest job taken was
  async, the lane's free slots too.
- ``jobsapp.acker`` acknowledges finished jobs and adds to the stats counters in batches
  (``acker``).

With a per-thread strategy (``Fetch.per_thread``: basic fetch, Sidekiq's) there is no fetcher
and no buffer: each processor thread blocks in its own fetch for the one job it runs next, so a
process never holds a job it cannot start (while the latest job was async and the async lane is
full, the threads wait for a free slot before fetching).

Lifecycle: ``start()``; ``quiet()`` stops fetching and puts the buffered, not yet started jobs
back at the front of their queues; ``stop(deadline)`` quiets, waits for running jobs until the
deadline, cancels the async jobs still running (their threads park, see ``aio``), flushes
acknowledgements, then puts every still-running job back at the front of its queue
(``requeue.lua``, guarded so a job is never both requeued and filed in retry) and tells
middleware through ``on_requeue``.

A job that finished but whose ack had not reached Redis when the process died runs again
elsewhere: at-least-once, with duplicates bounded by one ack batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from itertools import chain

from .. import ending, faults, limiter, registry
from ..backoff import Backoff, call_with_retry
from ..conf import jobs_settings
from ..connection import CONNECTION_ERRORS, REDIS_ERRORS
from ..outcomes import RequeueReason
from ..payload import decode
from ..processes import DurationCounter
from .acker import Acker
from .aio import PSEUDO_THREAD_ID_BASE, AsyncLane
from .fetch import Fetch, UnitOfWork
from .processor import Processor

logger = logging.getLogger("jobsapp.manager")


def queue_of(raw: bytes) -> str:
    """The queue a job read from an in-flight list goes back to: its payload's ``queue``."""
    try:
        queue = decode(raw).get("queue")
    except ValueError:  # malformed: back to the default queue, where a worker files it as dead
        queue = None
    return queue if isinstance(queue, str) and queue else str(jobs_settings.DEFAULT_QUEUE)


#: At stop, how long the acker gets to send the finished jobs' acks (after the running jobs' deadline).
ACK_FLUSH_SECONDS = 10.0

#: At stop, how long the idle processor threads of a per-thread fetch get to leave their fetch.
IDLE_THREAD_JOIN_SECONDS = 0.5


def _moving_average(average: float | None, sample: float) -> float:
    """Exponentially weighted (the newest sample weighs 1/10)."""
    return sample if average is None else average + (sample - average) / 10


@dataclass(slots=True)
class Running:
    unit: UnitOfWork
    run_at: float  # epoch seconds, for the busy list


class Manager:
    def __init__(
        self,
        *,
        fetch: Fetch,
        processor: Processor,
        concurrency: int,
        batch_size: int,
        block_seconds: float,
        stop_event: threading.Event,
        async_lane: AsyncLane | None = None,
    ) -> None:
        self.fetch = fetch
        self.async_lane = async_lane  # runs async jobs; their entries in _running have pseudo ids
        self.processor = processor
        self.concurrency = concurrency
        self.capacity = max(batch_size, 1)  # the most jobs one fetch takes, and the buffer holds
        # moving averages for the look-ahead (see _fetch_target), None until measured
        self._job_seconds: float | None = None
        self._fetch_seconds: float | None = None
        self.block_seconds = block_seconds
        self.stop_event = stop_event  # set when the process is stopping for good (hard stop)

        self._lock = threading.Lock()
        self._work_ready = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._buffer: deque[UnitOfWork] = deque()
        self._running: dict[int, Running] = {}  # thread id (or an async job's pseudo id) -> its job
        self._async_running = 0  # entries of _running that are async jobs in the lane
        # whether the latest job this process took was async (it needs a lane slot, not a thread;
        # see _fetch_target); at start, whether any registered job class is
        self._async_lately = async_lane is not None and any(registry.lookup(name).is_async for name in registry.names())
        self._reserved_fetches = 0  # per-thread fetch: fetches under way into a free lane slot
        self._quiet = threading.Event()
        self._processors_done = False
        # every queue was empty: an idle processor thread should block in the fetch for the next
        # job and run it itself (see _block_for_unit); the fetcher waits until it has one
        self._blocking_wanted = False
        self._blocking = False  # a processor thread is blocked in the fetch
        self._blocking_error: tuple[BaseException, bool] | None = None  # its fetch failed (error, unexpected)
        self._blocking_answered = False  # a blocking fetch got a reply since the fetcher last looked (ends an outage)

        self.acker = Acker(fetch, stop_event=stop_event)
        self._threads: list[threading.Thread] = []
        self._fetcher: threading.Thread | None = None

    @property
    def durations(self) -> DurationCounter:
        return self.acker.durations

    @property
    def processed_total(self) -> int:
        return self.acker.processed_total

    @property
    def failed_total(self) -> int:
        return self.acker.failed_total

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        if not self.fetch.per_thread:
            self._fetcher = threading.Thread(target=self._fetch_loop, name="jobsapp.fetcher", daemon=True)
        self._threads = [
            threading.Thread(target=self._process_loop, name=f"jobsapp.processor-{index}", daemon=True) for index in range(self.concurrency)
        ]
        if self.async_lane is not None:
            self.async_lane.start()
        if self._fetcher is not None:
            self._fetcher.start()
        self.acker.start()
        for thread in self._threads:
            thread.start()

    @property
    def is_quiet(self) -> bool:
        return self._quiet.is_set()

    def quiet(self) -> None:
        """Stop fetching; put buffered, unstarted jobs back at the front of their queues."""
        if self._quiet.is_set():
            return
        self._quiet.set()
        with self._lock:
            unstarted = list(self._buffer)
            self._buffer.clear()
            self._processors_done = True
            self._work_ready.notify_all()
            self._room.notify_all()
        self.fetch.interrupt()
        unstarted.extend(self.fetch.collect_pending())
        self._requeue(unstarted, reason=RequeueReason.QUIET)
        logger.info("quiet: fetching stopped, %d buffered jobs put back", len(unstarted))

    def stop(self, deadline: float) -> int:
        """Quiet, wait for running jobs until ``deadline`` (monotonic), then requeue the rest.

        Returns how many running jobs were put back unfinished.
        """
        self.quiet()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self.async_lane is not None:  # the lane's jobs, until the deadline
            self.async_lane.wait_idle(deadline)
        with self._lock:
            filed = self.processor.filed_stuck  # in retry/dead already (the hard limit): not put back
            unfinished = [running.unit for running in self._running.values() if not any(running.unit is unit for unit in filed)]
        if self.async_lane is not None:  # cancels the jobs still running: their threads park; put back below, never filed
            self.async_lane.stop(deadline)
        # the finished jobs' acks get their own time, past the running jobs' deadline: a finished
        # job whose ack is not sent runs again
        self.acker.stop(time.monotonic() + ACK_FLUSH_SECONDS)
        if self._fetcher is not None:
            self._fetcher.join(max(0.0, min(deadline - time.monotonic(), self.block_seconds + 1)))
        if self.fetch.per_thread:
            self._end_own_fetches()
        self._requeue(self.fetch.collect_pending(), reason=RequeueReason.QUIET)
        if unfinished:
            logger.warning("shutdown: %d jobs still running at the deadline are put back on their queues", len(unfinished))
            self._requeue(unfinished, reason=RequeueReason.SHUTDOWN)
        limiter.release_at_exit(self.processor.policy.client, self.fetch.inflight_key)  # theirs, and those stuck past the hard limit
        return len(unfinished)

    def _end_own_fetches(self) -> None:
        """Per-thread fetch, before the running jobs are put back: a thread that passed its quiet
        check just as quiet() unblocked the others may have sent its BRPOP after that; it has
        reached Redis by now, so unblock again and let the idle threads return (one of them
        could otherwise pop a job put back below)."""
        self.fetch.interrupt()
        with self._lock:
            running = set(self._running)
        give_up_at = time.monotonic() + IDLE_THREAD_JOIN_SECONDS
        for thread in self._threads:
            if thread.ident not in running:
                thread.join(max(0.0, give_up_at - time.monotonic()))

    # --- for the heartbeat ------------------------------------------------------------

    def busy(self) -> list[tuple[int, Running]]:
        with self._lock:
            return list(self._running.items())

    # --- threads ---------------------------------------------------------------------

    def _fetch_loop(self) -> None:
        backoff = Backoff("fetch", logger=logger)
        # the outage was seen by a blocking fetch (it may refuse while fetch.lua still answers an
        # empty queue, as BLMOVE does when Redis is out of memory): it ends when one answers
        blocking_outage = False
        while not self._quiet.is_set():
            with self._lock:
                while not self._quiet.is_set():
                    if self._blocking_error is not None:
                        break
                    if not self._blocking_wanted:  # while a processor thread blocks for a job, nothing to fetch
                        target = self._fetch_target()
                        if self._below_low_water(target):
                            break
                    self._room.wait(1.0)
                if self._quiet.is_set():
                    break
                failure, self._blocking_error = self._blocking_error, None
                answered, self._blocking_answered = self._blocking_answered, False
                # the wait ended below the low water mark with a fresh target, or with a failure
                want = 0 if failure is not None else target - len(self._buffer)
            if failure is not None:  # a processor thread's blocking fetch failed: wait, then fetch and reconcile
                blocking_outage = True
                backoff.pause(failure[0], self._quiet, unexpected=failure[1])
                continue
            if answered and backoff.in_outage and blocking_outage:  # Redis answers the blocking fetch again
                backoff.succeeded()
                blocking_outage = False
            started = time.monotonic()
            try:
                units = self.fetch.take(want, block_seconds=0)
            except REDIS_ERRORS as exc:  # away, or refusing (READONLY after a failover, OOM): wait it out
                backoff.pause(exc, self._quiet)
                continue
            except Exception as exc:  # noqa: BLE001  # an engine bug: the fetcher must outlive it (jobs stay safe in their queues)
                backoff.pause(exc, self._quiet, unexpected=True)
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
                with self._lock:
                    if not self._quiet.is_set():
                        self._blocking_wanted = True
                        self._work_ready.notify()
                continue
            self._fetch_seconds = _moving_average(self._fetch_seconds, time.monotonic() - started)
            if faults.POINT:
                faults.reach("after_fetch")
            with self._lock:
                if not self._quiet.is_set():
                    self._buffer.extend(units)
                    # one waiting thread; it wakes the next only if a unit is still left when it
                    # takes its own (a thread finishing its job meanwhile takes one without a wake)
                    self._work_ready.notify()
                    units = []
            if units:  # quieted while the fetch was in flight: give them back
                self._requeue(units, reason=RequeueReason.QUIET)

    def _process_loop(self) -> None:
        ident = threading.get_ident()
        backoff = Backoff("fetch", logger=logger)
        while True:
            unit = self._take_own_unit(ident, backoff) if self.fetch.per_thread else self._next_unit(ident)
            if unit is None:
                return
            self._run(ident, unit)

    def _next_unit(self, ident: int) -> UnitOfWork | None:
        """The next job for this processor thread from the shared buffer or, when every queue was
        empty, from its own blocking fetch; registered as running. None once quiet."""
        while True:
            with self._lock:
                while not self._buffer and not self._processors_done:
                    if self._blocking_wanted and not self._blocking:
                        self._blocking = True  # this thread blocks for the next job and runs it
                        break
                    self._work_ready.wait()
                else:
                    if not self._buffer:
                        return None
                    unit = self._buffer.popleft()
                    if self._buffer:
                        self._work_ready.notify()
                    self._running[ident] = Running(unit, time.time())
                    if self._below_low_water(self._fetch_target()):
                        self._room.notify()
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
        units: list[UnitOfWork] = []
        failure: tuple[BaseException, bool] | None = None
        try:
            while not units and not self._quiet.is_set():
                units = self.fetch.take(1, block_seconds=self.block_seconds)
                self._blocking_answered = True
        except REDIS_ERRORS as exc:  # nothing taken that we know of: the fetcher waits it out and reconciles
            failure = (exc, False)
        except Exception as exc:  # noqa: BLE001  # an engine bug: the thread must outlive it (the jobs stay in their queues or in flight)
            failure = (exc, True)
        if units and faults.POINT:
            faults.reach("after_fetch")
        with self._lock:
            self._blocking = False
            self._blocking_wanted = False
            self._blocking_error = failure
            self._room.notify()  # the fetcher: fetch what follows this job (or back off)
            if units and not self._quiet.is_set():
                unit = units[0]
                if len(units) > 1:  # other queues' waiters moved jobs too
                    self._buffer.extend(units[1:])
                    self._work_ready.notify()
                self._running[ident] = Running(unit, time.time())
                return unit
        if units:  # quieted while blocked: back to the front of their queues
            self._requeue(units, reason=RequeueReason.QUIET)
        return None

    def _take_own_unit(self, ident: int, backoff: Backoff) -> UnitOfWork | None:
        """Per-thread fetch: block in this thread's own fetch for its next job, registered as
        running; None once quiet."""
        while not self._quiet.is_set():
            reserved = self._async_lately  # the latest job was async: fetch only into a free lane slot, one fetch per slot
            if reserved:
                with self._lock:
                    if self._reserved_fetches >= self._fetch_target():
                        self._room.wait(0.5)
                        continue
                    self._reserved_fetches += 1
            units: list[UnitOfWork] = []
            try:
                units = self.fetch.take(1, block_seconds=self.block_seconds)
            except REDIS_ERRORS as exc:  # away, or refusing: nothing was taken; wait it out (one warning per thread and outage)
                backoff.pause(exc, self._quiet)
            except Exception as exc:  # noqa: BLE001  # an engine bug: the thread must outlive it (a job popped and lost is basic fetch's risk)
                backoff.pause(exc, self._quiet, unexpected=True)
            else:
                backoff.succeeded()
            with self._lock:
                if reserved:  # released as the job is registered: it counts as running from here on
                    self._reserved_fetches -= 1
                if units and not self._quiet.is_set():
                    self._running[ident] = Running(units[0], time.time())
                    return units[0]
            if units:
                self._requeue(units, reason=RequeueReason.QUIET)  # popped as the process went quiet: back to the front
        return None

    def _run(self, ident: int, unit: UnitOfWork) -> None:
        """Process ``unit``, registered in the running set under ``ident``, and record its outcome."""
        try:
            result = self.processor.process(unit)
        except CONNECTION_ERRORS as exc:
            # only when stopping for good during an outage: the job stays in flight and is
            # recovered by the next process in this slot or by the orphan sweeper
            logger.error("jid unknown queue=%s left in flight: Redis unavailable at shutdown (%s)", unit.queue, exc)
            self._leave(ident)
            return
        except REDIS_ERRORS as exc:  # Redis refusing a write (e.g. OOM) around a job: back on its queue once Redis takes it
            logger.error("queue=%s Redis refused a write around a job (%s); it goes back to its queue", unit.queue, exc)
            self._leave(ident)
            self._requeue([unit], reason=RequeueReason.ERROR, persistent=True)
            return
        except Exception as exc:  # noqa: BLE001  # an engine bug: parked in the dead set, never requeued into a hot loop
            self._leave(ident)
            self._park(unit, exc)
            return
        if result is None:  # an async job: the async lane runs it; this thread takes the next unit
            self._hand_off(ident, unit)
            return
        self.acker.record(unit, result)  # before leaving the running set: always known to be ours (_reconcile)
        with self._lock:
            self._running.pop(ident, None)
            if ident < PSEUDO_THREAD_ID_BASE:  # the look-ahead models the processor threads' turnover
                self._job_seconds = _moving_average(self._job_seconds, result.elapsed_seconds)
                self._async_lately = False
            else:
                self._async_running -= 1
            if self._below_low_water(self._fetch_target()):
                self._room.notify()  # a thread is free: the fetcher may take a job for it

    def _leave(self, ident: int) -> None:
        with self._lock:
            if self._running.pop(ident, None) is not None and ident >= PSEUDO_THREAD_ID_BASE:
                self._async_running -= 1

    def _hand_off(self, ident: int, unit: UnitOfWork) -> None:
        """Give an async job to the async lane once it has a free slot (waiting, unit in hand,
        while it is full: this thread then counts as busy, so the fetcher does not hoard more);
        quiet while waiting puts the unit back unstarted."""
        lane = self.async_lane
        if lane is None:  # the processor hands off only when there is a lane
            raise RuntimeError("an async job was handed off without an async lane")
        while not lane.acquire_slot(0.2):
            if self._quiet.is_set():
                self._leave(ident)
                self._requeue([unit], reason=RequeueReason.QUIET)
                return
        pseudo = lane.new_pseudo_thread_id()
        with self._lock:  # moved in one step: _reconcile and stop always see the unit
            running = self._running.pop(ident)
            self._running[pseudo] = running
            self._async_running += 1
            self._async_lately = True
            if self._below_low_water(self._fetch_target()):
                self._room.notify()
        lane.submit(lambda: self._run(pseudo, unit))

    def _fetch_target(self) -> int:
        """Under _lock: how many fetched, unstarted jobs this process may hold now: one per idle
        thread, plus the jobs its threads finish during one fetch round trip (twice that, for
        margin; 0 while jobs outlast a round trip), at most a batch. While the latest job taken was
        async, no more than the async lane's free slots either: a process does not hold async
        jobs it cannot start (they spread over the processes with free slots)."""
        idle = max(0, self.concurrency - (len(self._running) - self._async_running))
        if self._async_lately and self.async_lane is not None:  # any job a thread holds may be async: it needs a slot
            return min(self.capacity, idle, self.async_lane.concurrency - len(self._running))
        lookahead = 0
        if self._job_seconds is not None and self._fetch_seconds is not None:
            lookahead = int(2 * self.concurrency * self._fetch_seconds / max(self._job_seconds, 1e-6))
        return min(self.capacity, idle + lookahead)

    def _below_low_water(self, target: int) -> bool:
        """Under _lock: whether the fetcher should fetch now (the buffer is down to half its target;
        it is woken only then, not once per job)."""
        return len(self._buffer) <= target - max(1, target // 2)

    def _park(self, unit: UnitOfWork, exception: BaseException) -> None:
        """A job the processor failed on with something other than a Redis error (an engine
        bug): at a hard stop it stays in flight (recovered by the next process in this slot);
        otherwise it goes to the dead set as malformed. Putting it back at the front of its
        queue would run the same failure again at once."""
        if self.stop_event.is_set():
            logger.error("queue=%s job left in flight at shutdown (%s); recovered by the next process", unit.queue, exception)
            return
        logger.error("queue=%s unexpected error around a job (%s)", unit.queue, exception, exc_info=exception)
        try:
            self.acker.record(unit, self.processor.park(unit, exception))
        except Exception:  # could not even park it: it stays in flight for recovery
            logger.exception("queue=%s could not park the job; it stays in flight until this process's list is recovered", unit.queue)

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
        with self._lock:  # a job is recorded with the acker before it leaves the running set
            held = Counter(
                unit.raw for unit in chain(self._buffer, (running.unit for running in self._running.values()), self.acker.held(), fetched)
            )
        strays: list[UnitOfWork] = []
        for raw in listed:
            if held[raw] > 0:
                held[raw] -= 1
            else:
                strays.append(UnitOfWork(raw, queue_of(raw)))
        if strays:
            logger.warning("fetch: %d jobs moved in flight by a fetch whose reply was lost go back to their queues", len(strays))
            self._requeue(strays, reason=RequeueReason.RECONCILE)
        return fetched

    def _requeue(self, units: list[UnitOfWork], *, reason: RequeueReason, persistent: bool = False) -> None:
        """Put units back at the front of their queues. ``persistent`` (a live process putting
        back one job it could not handle) retries through a Redis outage until the process stops
        for good: nobody else would recover a live process's in-flight job."""
        if not units:
            return
        try:
            if persistent:
                call_with_retry(lambda: self.fetch.requeue(units), what="putting a job back", logger=logger, stop=self.stop_event)
            else:
                self.fetch.requeue(units)
        except REDIS_ERRORS as exc:
            # they stay in the in-flight list (reliable fetch): recovered by the next process in
            # this slot, or by the sweeper once this process's heartbeat has expired
            logger.error("could not put %d jobs back (%s); they stay in flight for recovery", len(units), exc)
            return
        for unit in units:
            try:
                item = decode(unit.raw)
            except ValueError:  # malformed: nothing for middleware to record
                continue
            if reason == RequeueReason.SHUTDOWN:
                logger.info("class=%s jid=%s queue=%s put back (unfinished at shutdown)", item.get("class"), item.get("jid"), unit.queue)
            ending.put_back(item, reason=reason)
