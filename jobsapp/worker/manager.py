"""The manager: one process's processor threads, its dispatcher and its acker.

Threads (all daemons, named):
- ``jobsapp.processor-<n>`` (``concurrency`` of them) each ask the dispatcher for the next unit
  of work and run it. The dispatcher is the fetch mode's (dispatch.py): with reliable fetch a
  fetcher thread (``jobsapp.fetcher``) keeps a small buffer filled and an idle thread blocks for
  the next job when every queue is empty; with basic fetch each thread fetches its own next job.
  An async job (``async def perform``) is handed to the async lane (``aio``) once it has a free
  slot, and the thread goes back for the next unit; while the lane is full the thread waits with
  its unit (counted busy, so no more is fetched). The lane's running jobs are in the running set
  (the busy list) under pseudo thread ids, and are recorded and acknowledged like any other.
- ``jobsapp.acker`` acknowledges finished jobs and adds to the stats counters in batches
  (``acker``).

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

from .. import acks, batch, ending, limiter, registry
from ..backoff import Backoff, call_with_retry
from ..connection import CONNECTION_ERRORS, REDIS_ERRORS
from ..outcomes import RequeueReason
from ..payload import decode
from ..processes import DurationCounter
from .acker import Acker
from .aio import PSEUDO_THREAD_ID_BASE, AsyncLane
from .dispatch import BufferedDispatcher, Dispatcher, Occupancy, PerThreadDispatcher, Running, moving_average
from .fetch import Fetch, UnitOfWork
from .processor import Processor

logger = logging.getLogger("jobsapp.manager")

#: At stop, how long the acker gets to send the finished jobs' acks (after the running jobs' deadline).
ACK_FLUSH_SECONDS = 10.0


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
        self.async_lane = async_lane  # runs async jobs; their entries in the running set have pseudo ids
        self.processor = processor
        self.concurrency = concurrency
        self.block_seconds = block_seconds
        self.stop_event = stop_event  # set when the process is stopping for good (hard stop)
        self.occupancy = Occupancy(
            concurrency=concurrency,
            capacity=max(batch_size, 1),
            async_lane=async_lane,
            async_lately=async_lane is not None and any(registry.lookup(name).is_async for name in registry.names()),
        )
        self.acker = Acker(fetch, stop_event=stop_event)
        self.dispatcher: Dispatcher
        if fetch.per_thread:
            self.dispatcher = PerThreadDispatcher(self.occupancy, fetch=fetch, block_seconds=block_seconds, requeue=self._requeue_for)
        else:
            self.dispatcher = BufferedDispatcher(
                self.occupancy, fetch=fetch, block_seconds=block_seconds, requeue=self._requeue_for, acknowledging=self.acker.held
            )
        self._threads: list[threading.Thread] = []
        self.fenced = False  # declared dead (``fence``): the processor threads start no other job

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
        self._threads = [
            threading.Thread(target=self._process_loop, name=f"jobsapp.processor-{index}", daemon=True) for index in range(self.concurrency)
        ]
        if self.async_lane is not None:
            self.async_lane.start()
        self.dispatcher.start()
        self.acker.start()
        for thread in self._threads:
            thread.start()

    @property
    def is_quiet(self) -> bool:
        return self.occupancy.quiet.is_set()

    def quiet(self) -> None:
        """Stop fetching; put buffered, unstarted jobs back at the front of their queues."""
        occupancy = self.occupancy
        if occupancy.quiet.is_set():
            return
        occupancy.quiet.set()
        with occupancy.lock:
            unstarted = self.dispatcher.quiet_locked()
            occupancy.work_ready.notify_all()
            occupancy.room.notify_all()
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
        with self.occupancy.lock:
            filed = self.processor.filed_stuck  # in retry/dead already (the hard limit): not put back
            running_units = [running.unit for running in self.occupancy.running.values()]
            unfinished = [unit for unit in running_units if not any(unit is stuck for stuck in filed)]
        if self.async_lane is not None:  # cancels the jobs still running: their threads park; put back below, never filed
            self.async_lane.stop(deadline)
        # the finished jobs' acks get their own time, past the running jobs' deadline: a finished
        # job whose ack is not sent runs again
        self.acker.stop(time.monotonic() + ACK_FLUSH_SECONDS)
        self.dispatcher.stop_fetching(deadline, self._threads)
        self._requeue(self.fetch.collect_pending(), reason=RequeueReason.QUIET)
        if unfinished:
            logger.warning("shutdown: %d jobs still running at the deadline are put back on their queues", len(unfinished))
            self._requeue(unfinished, reason=RequeueReason.SHUTDOWN)
        limiter.release_at_exit(self.processor.policy.client, self.fetch.inflight_key)  # theirs, and those stuck past the hard limit
        return len(unfinished)

    def fence(self) -> None:
        """This process was declared dead (``WorkerProcess.fence``, on the heartbeat thread): its
        processor threads start no other job, those whose jobs were interrupted included. A job
        one of them takes from here stays in the in-flight list, recovered with it by the next
        process in this slot; nothing is put back from here (no Redis call)."""
        self.fenced = True

    # --- for the heartbeat ------------------------------------------------------------

    def busy(self) -> list[tuple[int, Running]]:
        with self.occupancy.lock:
            return list(self.occupancy.running.items())

    # --- the processor threads ---------------------------------------------------------

    def _process_loop(self) -> None:
        ident = threading.get_ident()
        if self.fetch.reliable:  # a batch job's success and a middleware's held write ride with its ack (see acker)
            batch.route_successes(self.acker.defer_batch_success)
            acks.collect()
        backoff = Backoff("fetch", logger=logger)
        while True:
            unit = self.dispatcher.next_unit(ident, backoff)
            if unit is None:
                return
            if self.fenced:  # declared dead: left in flight for the next process in this slot
                self._leave(ident)
                return
            self._run(ident, unit)

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
        self.acker.record(unit, result)  # before leaving the running set: always known to be ours (reconcile)
        occupancy = self.occupancy
        with occupancy.lock:
            occupancy.running.pop(ident, None)
            if ident < PSEUDO_THREAD_ID_BASE:  # the look-ahead models the processor threads' turnover
                occupancy.job_seconds = moving_average(occupancy.job_seconds, result.elapsed_seconds)
                occupancy.async_lately = False
            else:
                occupancy.async_running -= 1
            self.dispatcher.room_freed_locked()

    def _leave(self, ident: int) -> None:
        occupancy = self.occupancy
        with occupancy.lock:
            if occupancy.running.pop(ident, None) is not None and ident >= PSEUDO_THREAD_ID_BASE:
                occupancy.async_running -= 1

    def _hand_off(self, ident: int, unit: UnitOfWork) -> None:
        """Give an async job to the async lane once it has a free slot (waiting, unit in hand,
        while it is full: this thread then counts as busy, so the fetcher does not hoard more);
        quiet while waiting puts the unit back unstarted."""
        lane = self.async_lane
        if lane is None:  # the processor hands off only when there is a lane
            raise RuntimeError("an async job was handed off without an async lane")
        occupancy = self.occupancy
        while not lane.acquire_slot(0.2):
            if occupancy.quiet.is_set():
                self._leave(ident)
                self._requeue([unit], reason=RequeueReason.QUIET)
                return
        pseudo = lane.new_pseudo_thread_id()
        with occupancy.lock:  # moved in one step: reconcile and stop always see the unit
            running = occupancy.running.pop(ident)
            occupancy.running[pseudo] = running
            occupancy.async_running += 1
            occupancy.async_lately = True
            self.dispatcher.room_freed_locked()
        lane.submit(lambda: self._run(pseudo, unit))

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

    def _requeue_for(self, units: list[UnitOfWork], reason: RequeueReason) -> None:
        """The dispatcher's way to put units back (see ``_requeue``)."""
        self._requeue(units, reason=reason)

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
