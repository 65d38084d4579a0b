"""Job timeouts: ``sidekiq_options(timeout=seconds)`` raising ``JobTimeout`` inside a running job.

``timeout_seconds`` (the option's rule, ``jobsapp.options``) validates the option when a class is
declared and when a job is pushed (a bad value is a clear error before anything is written); the
processor reads it again from the payload before the job runs (another client may have written it).

A sync job's timeout is enforced by the process's ``Watchdog``: one thread,
``jobsapp.timeouts``, started with the first job that has a timeout (processes whose jobs have
none never start it; those jobs pay one dict lookup). It is a ``Component`` (component.py):
``start()`` (called by the first guard, again by the first guard after a fork or a ``stop``),
``quiet()`` (nothing: running jobs keep their timeouts while a process drains) and
``stop(deadline)``; it waits on the injected clock (clock.py), so tests advance time past a
timeout instead of sleeping through it. The processor thread enters a ``Guard``
around ``perform`` only (middleware, limiter waits and the engine's filing are outside it). Past
the deadline the watchdog raises ``JobTimeout`` in that thread with
``PyThreadState_SetAsyncExc``: Python delivers it the next time the thread runs Python bytecode,
so a loop in Python code stops at once, while a blocking C call (``time.sleep``, a socket read, a
C extension's computation) is *not* interrupted: the exception arrives when the call returns.

The exception never lands outside the job: the watchdog fires only while the guard says the
thread is still inside that perform (a per-guard state under one lock), and leaving the guard
clears a pending exception that was not delivered yet, under the same lock. One fired just as
``perform`` returned is either cleared or delivered inside the guard: the job then fails with
``JobTimeout`` like any job that raised. The failure goes through the normal retry (retry set with
``error_class`` ``jobsapp.errors.JobTimeout``, then dead); a job that catches it and carries on is
not interrupted again, nor one where the exception was delivered inside a ``__del__`` or a gc
callback running in its thread (Python swallows it there: "Exception ignored in"; seen once under
Python 3.11 in test_timeouts): the hard limit is the backstop for both.

The hard limit (``JOBSAPP["TIMEOUT_HARD_LIMIT_SECONDS"]``, off by default): a job still inside
its guard that many seconds after its timeout fired ignored the exception (a blocking C call).
The watchdog then files it (the processor's ``on_stuck``: retry set with a ``JobTimeout`` saying
so) and calls ``on_hard_limit`` once, which the launcher turns into an immediate stop of the
process: its other in-flight jobs go back to the front of their queues, and the ``-P``
supervisor starts a fresh process in its slot.

Cancelling (``jobsapp.api.cancel``; the request reaches this process through
``cancel_listener``): ``cancel(jid)`` raises ``JobCancelled`` in the thread that runs that jid's
``perform``, under the same rules as a timeout: delivered at the next bytecode, a blocking C call
stops when it returns, never outside ``perform``, cleared when perform returned first (a cancel
racing the job's own end leaves one outcome: the job's, or the cancel's). A job with a timeout is
found through its guard. A job without one (most jobs) pays no guard and no lock: it runs through
``cancellable``, which notes ``thread id -> (jid, thread id)`` (a new tuple per run) in a dict before perform and pops it
after (two dict operations, atomic under the GIL), and the thread is looked up only when a cancel
arrives. Whoever pops the entry owns it: a cancel pops it under the lock and then interrupts the
thread; a thread that finds its entry gone knows a cancel took it and takes the lock itself, which
waits for the interrupt to be raised, then clears it if it was not delivered yet (``_settle``).
A jid asked for while no thread runs it is remembered for ``cancellation.RETENTION_SECONDS``: a
guard or ``cancellable`` perform started for it raises ``JobCancelled`` before perform is called
(each notes its thread first and reads the requests after, and a cancel remembers first and looks
for the thread after, so one of the two always sees the other). A cancelled job is never filed by
the hard limit (which is for timeouts).

Lease expiry (``expire_leases``): a process that finds it was declared dead (fencing, see
heartbeat.py and launcher.py) raises ``LeaseExpired`` in every sync job running now, under a
guard or ``cancellable``, through the same guarded ``PyThreadState_SetAsyncExc``, before it exits:
another process owns those jobs now.

The processor reaches the watchdog through the door's table (``jobsapp.ending``'s ``timeouts``
row: ``start`` checks the option; its ``cancel`` row's guard asks the processor's per-job record
for ``within_timeout`` when the job has a ``timeout``, else for ``cancellable``).
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import threading
from _thread import get_ident
from collections.abc import Callable
from enum import Enum
from typing import Any

from .. import cancellation
from ..clock import SYSTEM_CLOCK, Clock
from ..component import Component
from ..errors import JobCancelled, JobsError, JobTimeout
from ..options import TIMEOUT_KEY, positive_seconds, timeout_seconds

logger = logging.getLogger("jobsapp.timeouts")


class LeaseExpired(JobsError):
    """Raised in a running job whose process was declared dead (its heartbeat expired and its
    in-flight jobs were recovered by another process): the job belongs to another run now."""

    DEFAULT_MESSAGE = "this worker process was declared dead: its jobs were recovered by another process"

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or (self.DEFAULT_MESSAGE,)))


def raise_in_thread(thread_id: int, exception: type[BaseException] | None) -> None:
    """Make ``exception`` pending in the thread (None: clear a pending one). CPython's only way to
    interrupt another thread; the thread raises it at its next bytecode boundary."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exception) if exception is not None else None)


class GuardState(Enum):
    RUNNING = "running"  # inside perform, deadline not reached
    FIRED = "fired"  # JobTimeout (JobCancelled, LeaseExpired) was raised in the thread; perform has not returned yet
    STUCK = "stuck"  # still inside perform past the hard limit: filed, the process is stopping
    DONE = "done"  # perform returned or raised: the watchdog never touches the thread again


class Guard:
    """One sync ``perform`` under a timeout, in the thread that runs it (see ``Watchdog.within``)."""

    __slots__ = ("class_name", "deadline", "fired_with", "jid", "on_stuck", "queue", "state", "thread_id", "timeout_seconds")

    def __init__(
        self,
        timeout_seconds: float,
        *,
        on_stuck: Callable[[], None] | None,
        class_name: str | None = None,
        jid: str | None = None,
        queue: str | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.on_stuck = on_stuck
        # which job this is, for the watchdog's log lines (the processor's ``class= jid= queue=``)
        self.class_name = class_name
        self.jid = jid
        self.queue = queue
        self.thread_id = threading.get_ident()
        self.deadline = 0.0
        self.state = GuardState.RUNNING
        self.fired_with: type[BaseException] = JobTimeout  # what FIRED raised: JobTimeout, JobCancelled or LeaseExpired

    def describe(self, exception: BaseException) -> None:
        """Give a JobTimeout the watchdog raised (built without arguments) the timeout it enforced."""
        if isinstance(exception, JobTimeout) and exception.args == (JobTimeout.DEFAULT_MESSAGE,):
            exception.args = (f"the job ran past its timeout of {self.timeout_seconds:g} s",)


#: The longest the watchdog thread waits with no guarded perform running (it is woken sooner by
#: a new guard or a stop).
IDLE_WAIT_SECONDS = 3600.0


class Watchdog(Component):
    """Raises JobTimeout in processor threads past their job's deadline; one per process.

    ``clock`` (clock.py) gives the deadlines and the waits; ``interrupt(thread_id, exception)`` is
    ``raise_in_thread`` (tests may watch it). ``hard_limit_seconds`` None: no hard limit."""

    thread_name = "timeouts"

    def __init__(
        self,
        *,
        hard_limit_seconds: float | None = None,
        on_hard_limit: Callable[[], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        interrupt: Callable[[int, type[BaseException] | None], None] = raise_in_thread,
    ) -> None:
        super().__init__(clock=clock)
        self.hard_limit_seconds = hard_limit_seconds
        self.on_hard_limit = on_hard_limit
        self.interrupt = interrupt
        self._lock = threading.Lock()
        self._woken = threading.Event()  # a guard with an earlier deadline was entered, or stop
        self._guards: dict[int, Guard] = {}  # thread id -> the guard it is inside
        self._pid = 0
        self._cancel_requests: dict[str, float] = {}  # jid -> when its cancel was asked (monotonic), oldest first
        # thread id -> (jid, thread id) of a ``cancellable`` perform running now: written and popped
        # by its thread without the lock; popped by a cancel or a lease expiry under the lock
        self._performing: dict[int, tuple[str, int]] = {}
        # thread id -> jid of a ``cancellable`` perform a cancel or a lease expiry interrupted,
        # until its thread has settled (under the lock)
        self._interrupted: dict[int, str] = {}
        self.fired_total = 0
        self.stuck_total = 0
        self.cancelled_total = 0

    def within(
        self,
        seconds: float,
        call: Callable[[], Any],
        *,
        on_stuck: Callable[[], None] | None = None,
        class_name: str | None = None,
        jid: str | None = None,
        queue: str | None = None,
    ) -> Callable[[], Any]:
        """``call`` (a sync perform) run under a timeout of ``seconds``, to be called in the thread
        that runs it. ``on_stuck`` files the job if it outlives the hard limit (it is called on the
        watchdog thread); ``class_name``, ``jid`` and ``queue`` name the job in the watchdog's log
        lines. Whatever the moment JobTimeout is delivered, it leaves this function as the job's
        exception, never later."""

        def guarded() -> Any:
            guard = Guard(seconds, on_stuck=on_stuck, class_name=class_name, jid=jid, queue=queue)
            error: BaseException | None = None
            try:
                # inside the try: a JobTimeout delivered as it returns is the job's
                if self._enter(guard):  # its cancel was asked before it started: perform is not called
                    raise JobCancelled("the job was cancelled before it started")
                result = call()
            except BaseException as exception:  # noqa: BLE001  # re-raised below, once the guard is left
                error = exception
            # Every call below is made from this frame, inside a try: Python delivers a pending
            # exception when a function starts, so one arriving before the clear is caught here.
            try:
                fired = self._leave(guard)
            except (JobTimeout, JobCancelled, LeaseExpired) as late:  # fired as perform returned, delivered while leaving
                self._leave(guard)  # nothing is pending any more: the watchdog fires once per guard
                fired, error = True, late
            if error is not None:
                if fired:
                    guard.describe(error)
                raise error
            return result

        return guarded

    def cancellable(self, call: Callable[[], Any], *, jid: str) -> Callable[[], Any]:
        """``call`` (a sync perform without a timeout), to be called in the thread that runs it,
        where ``cancel(jid)`` raises JobCancelled (and ``expire_leases`` LeaseExpired) as a guard
        would, without a guard: two dict operations and no lock while nobody cancels it. Whatever
        the moment the exception is delivered, it leaves this function as the job's exception,
        never later."""
        performing, requests = self._performing, self._cancel_requests

        def perform() -> Any:
            ident = get_ident()
            entry = (jid, ident)  # a new tuple each run, told apart by identity: a cancel pops only the entry it found
            performing[ident] = entry  # noted before the requests are read (see the module header)
            error: BaseException | None = None
            try:
                # inside the try: a JobCancelled delivered as it returns is the job's
                if requests and jid in requests:  # its cancel was asked before it started: perform is not called
                    raise JobCancelled("the job was cancelled before it started")
                result = call()
            except BaseException as exception:  # noqa: BLE001  # re-raised below, once the entry is settled
                error = exception
            # As in ``within``: every call below is made from this frame, inside a try, so an
            # exception pending when one starts is caught here.
            try:
                if performing.pop(ident, None) is not entry:  # a cancel took it: its exception may be pending
                    self._settle(ident, entry)
            except (JobCancelled, LeaseExpired) as late:  # raised as perform returned, delivered while settling
                self._settle(ident, entry)  # nothing is pending any more
                error = late
            if error is not None:
                raise error
            return result

        return perform

    def _settle(self, ident: int, entry: tuple[str, int]) -> None:
        """In a ``cancellable`` perform's thread whose entry a cancel or a lease expiry took:
        under the lock, so after the interrupt was raised, clear it if it was not delivered yet,
        and forget the entry (also one a cancel put back after taking it by mistake)."""
        with self._lock:
            self.interrupt(ident, None)
            self._interrupted.pop(ident, None)
            if self._performing.get(ident) is entry:
                del self._performing[ident]

    def _take_performing(self, ident: int, entry: tuple[str, int], exception: type[BaseException]) -> bool:
        """Under the lock: pop ``entry`` (a ``cancellable`` perform seen running) and raise
        ``exception`` in its thread; False when its thread had left that perform meanwhile (an
        entry of its next perform, popped by mistake, is put back: that thread's ``_settle``
        takes the lock before it reads it)."""
        taken = self._performing.pop(ident, None)
        if taken is not entry:
            if taken is not None:
                self._performing[ident] = taken
            return False
        self._interrupted[ident] = entry[0]
        self.interrupt(ident, exception)
        return True

    def expire_leases(self) -> int:
        """Raise ``LeaseExpired`` in every sync job running now (its process was declared dead);
        how many. Each guard fires once: a job already past its timeout keeps the JobTimeout it
        was given."""
        with self._lock:
            expired = 0
            for guard in self._guards.values():
                if guard.state is GuardState.RUNNING:
                    guard.state = GuardState.FIRED
                    guard.fired_with = LeaseExpired
                    self.interrupt(guard.thread_id, LeaseExpired)
                    expired += 1
            for ident, entry in list(self._performing.items()):
                expired += self._take_performing(ident, entry, LeaseExpired)
            return expired

    def cancel(self, jid: str) -> bool:
        """Cancel the job ``jid``: JobCancelled raised in the thread that runs its perform (True),
        else remembered so a perform started for it raises JobCancelled before it is called (False)."""
        with self._lock:
            cancellation.remember(self._cancel_requests, jid, asked_at=self.clock.monotonic())
            for guard in self._guards.values():
                if guard.jid == jid and guard.state is GuardState.RUNNING:
                    guard.state = GuardState.FIRED
                    guard.fired_with = JobCancelled
                    self.cancelled_total += 1
                    self.interrupt(guard.thread_id, JobCancelled)
                    return True
            for ident, entry in list(self._performing.items()):
                if entry[0] == jid and self._take_performing(ident, entry, JobCancelled):
                    self.cancelled_total += 1
                    return True
        return False

    def running(self) -> dict[int, tuple[float, GuardState]]:
        """thread id -> (timeout seconds, state) of the sync performs running now: guarded ones,
        and ``cancellable`` ones (an infinite timeout; FIRED once interrupted, until they left)."""
        with self._lock:
            running = {ident: (math.inf, GuardState.RUNNING) for ident in list(self._performing)}
            running.update((ident, (math.inf, GuardState.FIRED)) for ident in self._interrupted)
            running.update((thread_id, (guard.timeout_seconds, guard.state)) for thread_id, guard in self._guards.items())
            return running

    def start(self) -> None:
        """Start the thread (the first guard does; guards entered after a ``stop`` or in a forked
        child start it again)."""
        self._stop.clear()
        self._pid = os.getpid()
        super().start()

    def _wake(self) -> None:
        self._woken.set()

    # --- the processor thread's side (under the lock: never blocks on Redis) -------------

    def _enter(self, guard: Guard) -> bool:
        """Register the guard; whether its job's cancel was asked already (it is then FIRED)."""
        with self._lock:
            if guard.timeout_seconds == math.inf:  # only cancellable: the watchdog thread has nothing to wait for
                guard.deadline = math.inf
                self._guards[guard.thread_id] = guard
            else:
                guard.deadline = self.clock.monotonic() + guard.timeout_seconds
                earliest = min((other.deadline for other in self._guards.values() if other.state is GuardState.RUNNING), default=math.inf)
                self._guards[guard.thread_id] = guard
                if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                    self.start()
                elif guard.deadline < earliest:
                    self._woken.set()
            if self._cancel_requests and guard.jid in self._cancel_requests:
                guard.state = GuardState.FIRED
                guard.fired_with = JobCancelled
                self.cancelled_total += 1
                return True
            return False

    def _leave(self, guard: Guard) -> bool:
        """Mark the guard done and clear an exception fired but not yet delivered; whether it fired."""
        with self._lock:
            fired = guard.state is not GuardState.RUNNING
            if fired:
                self.interrupt(guard.thread_id, None)
            guard.state = GuardState.DONE
            if self._guards.get(guard.thread_id) is guard:
                del self._guards[guard.thread_id]
            return fired

    # --- the watchdog thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            # cleared before the stop flag and the guards are read: a stop or a guard entered
            # after this line ends the wait below at once
            self._woken.clear()
            if self.stopping:
                return
            stuck: list[Guard] = []
            fired: list[Guard] = []
            with self._lock:
                now = self.clock.monotonic()
                wake = math.inf
                for guard in list(self._guards.values()):
                    if guard.state is GuardState.RUNNING:
                        if now >= guard.deadline:
                            guard.state = GuardState.FIRED
                            self.fired_total += 1
                            self.interrupt(guard.thread_id, JobTimeout)
                            fired.append(guard)
                        else:
                            wake = min(wake, guard.deadline)
                    if guard.state is GuardState.FIRED and guard.fired_with is not JobCancelled and self.hard_limit_seconds is not None:
                        hard_deadline = guard.deadline + self.hard_limit_seconds
                        if now >= hard_deadline:
                            guard.state = GuardState.STUCK
                            self.stuck_total += 1
                            stuck.append(guard)
                        else:
                            wake = min(wake, hard_deadline)
            if not (stuck or fired):
                self.clock.wait(self._woken, min(IDLE_WAIT_SECONDS, wake - now))
                continue
            for guard in fired:
                logger.warning(
                    "class=%s jid=%s queue=%s thread=%s past its timeout of %g s: JobTimeout raised in it",
                    guard.class_name,
                    guard.jid,
                    guard.queue,
                    guard.thread_id,
                    guard.timeout_seconds,
                )
            if stuck:
                self._hard_limit(stuck)

    def _hard_limit(self, stuck: list[Guard]) -> None:
        """Outside the lock (filing talks to Redis): file each stuck job, then stop the process."""
        for guard in stuck:
            logger.error(
                "class=%s jid=%s queue=%s thread=%s still running %g s after its timeout of %g s fired (a blocking call ignored "
                "JobTimeout): it goes to the retry set and this worker process stops (TIMEOUT_HARD_LIMIT_SECONDS)",
                guard.class_name,
                guard.jid,
                guard.queue,
                guard.thread_id,
                self.hard_limit_seconds,
                guard.timeout_seconds,
            )
            if guard.on_stuck is not None:
                try:
                    guard.on_stuck()
                except Exception:  # not filed: it stays in flight and is recovered by the next process in the slot
                    logger.exception(
                        "class=%s jid=%s queue=%s thread=%s could not file the stuck job; it is recovered from the in-flight list",
                        guard.class_name,
                        guard.jid,
                        guard.queue,
                        guard.thread_id,
                    )
        if self.on_hard_limit is not None:
            self.on_hard_limit()


_default: Watchdog | None = None
_default_lock = threading.Lock()


def default_watchdog() -> Watchdog:
    """The process's watchdog for processors built without one (no hard limit)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Watchdog()
        return _default


__all__ = [
    "TIMEOUT_KEY",
    "Guard",
    "GuardState",
    "LeaseExpired",
    "Watchdog",
    "default_watchdog",
    "positive_seconds",
    "raise_in_thread",
    "timeout_seconds",
]
