"""The acker: acknowledges finished jobs and adds to the stats counters, in batches.

One daemon thread, ``jobsapp.acker``, per worker process. Processor threads hand it each
finished job (``record``, under a short lock, no Redis call); the thread sends everything
recorded since its previous call in one ``ack.lua`` round trip (at most ``MAX_ACK_BATCH`` jobs),
which removes the jobs from the in-flight list (reliable fetch), adds to ``stat:processed`` and
``stat:failed`` (total and daily) and forgets their recovery counts. That is how a process
drains many thousand jobs a second without a round trip per job.

Wake-ups: a processor thread wakes the acker only when it is idle and waiting; while a batch is
on its way to Redis the next one gathers without a wake-up per job. With a fetch that is not
reliable (basic) an ack only counts, so after each wake-up the acker also lets jobs gather while
they keep finishing, up to ``COUNT_ONLY_GATHER_SECONDS``, and sends once none has finished for
``COUNT_ONLY_PAUSE_SECONDS`` (the stats lag by at most the first while jobs run, the second after).

With Redis full (maxmemory reached, OOM) the jobs still leave the in-flight list (``ack.lua``
removes before it writes anything Redis would refuse); only the counts wait, and ride with the
next batch. When Redis is away or refuses otherwise, the batch is resent as it was, with the same token, so
``ack.lua`` applies it once (the counters are not added twice when only the reply was lost);
the jobs stay in the in-flight list meanwhile (safe: at worst they run again after a crash).
At a hard stop during an outage the acker gives up: those finished jobs stay in flight and run
again once the list is recovered (at-least-once, duplicates bounded by one batch).

A batch job's success rides with its ack: with reliable fetch a processor thread hands it here
(``defer_batch_success``, through ``jobsapp.batch.route_successes``) instead of counting it in
its own thread, and each round first counts the successes recorded so far, one
``batch_update.lua`` call per batch (``batch.count_successes``), then acknowledges. So a job is
never acknowledged before its batch counted it; if that call fails, the round is resent as a
whole (counting is idempotent per jid) and nothing is acknowledged meanwhile.

Likewise a server middleware's durable write (``jobsapp.hold_ack``: tracking's final status): the
holds a processor thread recorded while running its job are taken with ``record`` and each round
waits for every hold taken before it (``HOLD_WAIT_SECONDS`` at most, then the jobs are
acknowledged anyway and the late write logged, as a failed write is) before its ack.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time

import redis

from .. import acks, batch
from ..backoff import Backoff
from ..processes import DurationCounter
from .fetch import Fetch, UnitOfWork
from .processor import Result

logger = logging.getLogger("jobsapp.acker")

#: The most acknowledgements sent in one ack.lua call.
MAX_ACK_BATCH = 500

#: With a fetch that is not reliable an ack only adds to the stats counters: after a wake-up the
#: acker lets finished jobs gather while they keep coming, up to this long, so a busy process
#: sends one call a second, not one per few jobs (Sidekiq flushes its counters every 5 s)...
#: (Reliable fetch sends at once: a finished job waiting for its ack runs again after a crash.)
COUNT_ONLY_GATHER_SECONDS = 1.0

#: ...and sends as soon as no job has finished for this long (the end of a burst is counted
#: within milliseconds; stop sends what is left at once).
COUNT_ONLY_PAUSE_SECONDS = 0.005

#: With Redis full, the longest pause before the next ack once the counters were refused (the
#: jobs of the refused batch are out of flight already; those finishing meanwhile wait this long).
COUNTS_REFUSED_CAP_SECONDS = 1.0

#: The longest a round waits for one held write (``jobsapp.hold_ack``) before acknowledging.
HOLD_WAIT_SECONDS = 60.0

#: How long ``stop`` waits for the last batch to reach Redis.
STOP_JOIN_SECONDS = 10.0


class Acker:
    """Batches acknowledgements and stats of one process's finished jobs into ``ack.lua`` calls."""

    def __init__(self, fetch: Fetch, *, stop_event: threading.Event) -> None:
        self.fetch = fetch
        self.stop_event = stop_event  # set when the process is stopping for good (hard stop)
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._units: list[UnitOfWork] = []
        self._jids: list[str] = []
        self._sending: list[UnitOfWork] = []  # the batch on its way to Redis
        self._successes: list[tuple[redis.Redis, str, str]] = []  # batch jobs' successes: (client, bid, jid)
        self._holds: list[acks.Release] = []  # middleware writes to be durable before the next ack
        self._processed = 0
        self._failed = 0
        self._waiting = False  # the thread waits for work: the next record wakes it
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._gather_seconds = 0.0 if fetch.reliable else COUNT_ONLY_GATHER_SECONDS
        self.durations = DurationCounter()  # under the acker's lock
        self.processed_total = 0
        self.failed_total = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jobsapp.acker", daemon=True)
        self._thread.start()

    def stop(self, deadline: float | None = None) -> None:
        """Send what is left and end the thread, the lifecycle of ``jobsapp.component``: join it
        until ``deadline`` (monotonic), at most ``STOP_JOIN_SECONDS``. A batch still on its way
        then is the daemon thread's to finish; a job whose ack never reaches Redis stays in flight
        and runs again (at-least-once)."""
        with self._lock:
            self._stopping = True
            self._ready.notify_all()
        if self._thread is not None:
            timeout = STOP_JOIN_SECONDS
            if deadline is not None:
                timeout = max(0.0, min(timeout, deadline - time.monotonic()))
            self._thread.join(timeout)

    def record(self, unit: UnitOfWork, result: Result) -> None:
        """A processor thread finished ``unit``: acknowledge it (when it is still in flight) and
        count it in the next batch (after the writes its middleware held it for)."""
        holds = acks.take()
        with self._lock:
            if holds:
                self._holds.extend(holds)
            if result.acknowledge and self.fetch.reliable:
                self._units.append(unit)
                self._jids.append(result.jid)
            self._processed += 1
            if result.failed:
                self._failed += 1
            self.durations.observe(result.job_class, result.elapsed_seconds)
            if self._waiting:
                self._waiting = False
                self._ready.notify()

    def defer_batch_success(self, client: redis.Redis, bid: str, jid: str) -> None:
        """A processor thread's batch job succeeded: count it in the next round, before its ack
        (the ``record`` that follows wakes the thread)."""
        with self._lock:
            self._successes.append((client, bid, jid))

    def held(self) -> list[UnitOfWork]:
        """Finished jobs not yet acknowledged: still this process's (see Manager._reconcile)."""
        with self._lock:
            return [*self._units, *self._sending]

    def _next_batch(self) -> tuple[list[UnitOfWork], list[str], int, int, list[tuple[redis.Redis, str, str]]] | None:
        """The next batch to send (its units, their jids, the counts, and every batch success
        recorded so far), waiting for one; None once stopped with nothing left."""
        with self._lock:
            while not (self._units or self._processed or self._successes) and not self._stopping:
                self._waiting = True
                self._ready.wait(1.0)
            self._waiting = False
            if not (self._units or self._processed or self._successes):
                return None
            if self._gather_seconds and not self._stopping:
                # count-only: gather while jobs keep finishing (one call per COUNT_ONLY_GATHER_SECONDS
                # at most) and send once they pause; the lock is free meanwhile; only stop() notifies
                gather_until = time.monotonic() + self._gather_seconds
                seen = self._processed
                while not self._stopping:
                    self._ready.wait(COUNT_ONLY_PAUSE_SECONDS)
                    if self._processed == seen or time.monotonic() >= gather_until:
                        break
                    seen = self._processed
            units = self._units[:MAX_ACK_BATCH]
            jids = self._jids[:MAX_ACK_BATCH]
            del self._units[:MAX_ACK_BATCH]
            del self._jids[:MAX_ACK_BATCH]
            processed, failed = self._processed, self._failed
            self._processed = self._failed = 0
            successes, self._successes = self._successes, []
            holds, self._holds = self._holds, []
            self._sending = units  # still ours until acknowledged
        for release in holds:  # outside the lock: processor threads go on recording meanwhile
            if not release(HOLD_WAIT_SECONDS):
                logger.error("ack: a middleware's write was not durable within %.0f s; its job is acknowledged anyway", HOLD_WAIT_SECONDS)
        return units, jids, processed, failed, successes

    def _run(self) -> None:
        backoff = Backoff("ack", logger=logger)
        counts_backoff = Backoff("ack counts", logger=logger, cap_seconds=COUNTS_REFUSED_CAP_SECONDS)
        # a batch whose reply was not seen (Redis may have applied it) is resent as it was, with
        # its token, so ack.lua can tell and the stats are not counted twice
        unsent: tuple[list[UnitOfWork], list[str], int, int, list[tuple[redis.Redis, str, str]], str] | None = None
        while True:
            if unsent is None:
                batch = self._next_batch()
                if batch is None:
                    return
                unsent = (*batch, os.urandom(8).hex())
            units, jids, processed, failed, successes, token = unsent
            try:
                if successes:  # counted before any ack: a job acknowledged has been counted
                    _count_successes(successes)
                    unsent = (units, jids, processed, failed, [], token)
                acknowledged = self.fetch.acknowledge(
                    units, jids, processed=processed, failed=failed, today=dt.datetime.now(dt.UTC).date(), token=token
                )
            except Exception as exc:  # noqa: BLE001  # Redis away or refusing, or a bug: resent as it was, the acker lives on
                with self._lock:
                    stopping = self._stopping and self.stop_event.is_set()
                if stopping:
                    logger.error(
                        "ack: Redis unavailable at shutdown (%s); %d finished jobs stay in flight and may run again", exc, len(units)
                    )
                    return
                time.sleep(backoff.failed(exc))
                continue
            unsent = None
            with self._lock:
                self._sending = []
                stopping = self._stopping
                if not acknowledged.counted and not stopping:
                    # Redis is full: the jobs are out of flight, but their counts were refused;
                    # they ride with the next batch (sent once Redis takes writes again)
                    self._processed += processed
                    self._failed += failed
            backoff.succeeded()
            if not acknowledged.counted:
                if stopping:
                    logger.error("ack: Redis refuses writes at shutdown; %d processed jobs were not counted", processed)
                    processed = failed = 0
                else:
                    # the next batch waits a little (capped at a second) instead of spinning on a full Redis
                    time.sleep(counts_backoff.failed(redis.exceptions.OutOfMemoryError("stats counters refused: Redis is full")))
                    continue
            counts_backoff.succeeded()
            self.processed_total += processed
            self.failed_total += failed


def _count_successes(successes: list[tuple[redis.Redis, str, str]]) -> None:
    """Count batch successes, grouped by the client each was handed with, in their order."""
    by_client: dict[int, tuple[redis.Redis, list[tuple[str, str]]]] = {}
    for client, bid, jid in successes:
        by_client.setdefault(id(client), (client, []))[1].append((bid, jid))
    for client, pairs in by_client.values():
        batch.count_successes(client, pairs)
