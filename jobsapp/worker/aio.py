"""The async lane: one event loop per worker process for jobs whose ``perform`` is a coroutine.

A job class whose ``perform`` is an ``async def`` (``Job.is_async``, decided when the class is
defined) is an async job. A processor thread that takes one hands it to this lane and goes back
for the next job at once; the lane runs at most ``ASYNC_CONCURRENCY`` async jobs at a time
(``runworkers --async-concurrency``), separately from the ``-c`` processor threads.

Threads:
- ``jobsapp.event-loop`` runs the loop. Only coroutines run there: each job's ``perform`` (under
  its ``timeout``, if it has one) and nothing else of the engine, so the engine never blocks it.
- ``jobsapp.async-<n>`` (started on demand, at most ``ASYNC_CONCURRENCY``): one per running async
  job. It does for the job everything a processor thread does for a sync job, in the same code
  (``Processor.process``): the server middleware chain (sync ``call``: it wraps the job and sees
  its exception), Django's ``close_old_connections``, the retry filing, tracking's records. The
  innermost call of the chain hands the coroutine to the loop and parks this thread on its result.
  While it is parked, ``sync_to_async`` calls the coroutine makes with ``thread_sensitive=True``
  (Django's async ORM: ``await Model.objects.aget(...)``) run in this thread, as asgiref runs them
  under an ASGI server: the job's database connection is the one its thread closes when it ends.

- ``jobsapp.async-io-<n>`` (started on demand, at most ``min(32, CPUs + 4)`` as Python's
  default): the loop's default executor, where ``asyncio.to_thread`` and
  ``run_in_executor(None, ...)`` run blocking calls. Daemon threads: a blocking call a job
  cancelled at shutdown left running does not hold the process's exit (a ``ThreadPoolExecutor``'s
  threads are joined at exit).

So a running async job costs a parked thread (a small stack, no CPU) but never a processor
thread, and 100 of them share one loop. What a job author must not do: block the loop. Code in
``async def perform`` must await (``asyncio.sleep``, an async HTTP client); a blocking call
(``time.sleep``, ``requests``, the sync ORM, which Django refuses on a loop) stalls every async job
of the process: wrap it in ``sync_to_async`` / ``asyncio.to_thread``.

What becomes of an async job is what becomes of a sync one: middleware, retries, the busy set
(each running job under its own pseudo thread id in ``<identity>:work``), tracking and reliable
fetch (acknowledged in the ack batch after it finished) are the manager's and the processor's.
The lane is a ``Component`` (component.py): ``start()`` starts the loop; ``quiet()`` does nothing
(its running jobs go on; the manager stops handing it new ones); ``stop(deadline)`` waits for
the running jobs until the deadline, then cancels the coroutines of those still running
(``CancelledError`` in the job; the loop gets ``CANCEL_GRACE_SECONDS`` for their ``finally``
blocks) and stops the loop. The manager then puts those jobs back at the front of their queues
(``requeue.lua``). The
thread of a cancelled job parks until the process exits, like a sync job's thread stuck at the
deadline, so nothing files it in retry as well. (A job that swallows its ``CancelledError`` and
returns is acknowledged as done, and the requeue skips it; one that turns it into another
exception is filed as that failure, and the requeue skips it: never both.)
A cancel (``jobsapp.api.cancel``, through ``cancel(jid)``) cancels the job's coroutine and ends it
with ``JobCancelled`` in place of the ``CancelledError`` (a job whose cancel was asked before it
started is not started); a coroutine that blocks the loop is cancelled at its next await.
A job's ``timeout`` option cancels its coroutine and fails it with ``JobTimeout``; a coroutine
that blocked the loop past its timeout (so it could not be cancelled) fails with ``JobTimeout``
when it returns.

TTIN (``launcher.dump_threads``) also logs each running job's await chain through ``log_tasks``,
asked of the loop: when the loop does not answer within a second, a job is blocking it.

Outside a worker (``jobsapp.testing``'s inline mode, a plain call) ``run`` uses a new loop in the
calling thread (``asyncio.run``).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import SyncToAsync, async_to_sync

from .. import cancellation
from ..clock import SYSTEM_CLOCK, Clock
from ..component import Component
from ..errors import JobCancelled, JobTimeout

logger = logging.getLogger("jobsapp.aio")

Params = ParamSpec("Params")
Returned = TypeVar("Returned")

#: Pseudo thread ids of running async jobs (keys of the busy set) start here: above any real
#: thread id (a pthread address below 2**48 on 64-bit Linux), so they never collide.
PSEUDO_THREAD_ID_BASE = 1 << 56

#: How long the loop gets to run the cancelled jobs' clean-up at shutdown.
CANCEL_GRACE_SECONDS = 1.0

_current = threading.local()
#: The lanes started in this process, for ``log_tasks`` (TTIN).
_started_lanes: weakref.WeakSet[AsyncLane] = weakref.WeakSet()


def log_tasks() -> None:
    """TTIN: log where each running async job's coroutine awaits (the thread dump shows only its
    parked lane thread), or that the loop does not answer: something blocks it."""
    for lane in list(_started_lanes):
        lane.log_tasks()


def _await_chain(coroutine: Any) -> list[str]:
    """``file:line in function`` of each coroutine in an await chain, outermost first."""
    lines = []
    while coroutine is not None:
        frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "gi_frame", None)
        if frame is not None:
            lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        coroutine = getattr(coroutine, "cr_await", None) or getattr(coroutine, "gi_yieldfrom", None)
    return lines


def current_lane() -> AsyncLane | None:
    """The lane whose thread this is, or None outside a lane thread."""
    return getattr(_current, "lane", None)


def perform(call: Callable[[], Any], *, timeout_seconds: float | None = None, jid: str = "") -> Any:
    """Call ``call`` (the job's ``perform``) and, when it returns a coroutine, run it to the end:
    on this process's loop from a lane thread, else on a new loop in this thread. The innermost
    step of an async job's middleware chain; ``jid`` names the job for ``AsyncLane.cancel``."""
    result = call()
    if inspect.iscoroutine(result):
        return run(result, timeout_seconds=timeout_seconds, jid=jid)
    return result


def run(coroutine: Coroutine[Any, Any, Any], *, timeout_seconds: float | None = None, jid: str = "") -> Any:
    """Run ``coroutine`` to the end and return its result, JobTimeout past ``timeout_seconds``,
    JobCancelled when the lane cancels ``jid``."""
    lane = current_lane()
    if lane is None:
        return asyncio.run(_with_timeout(coroutine, timeout_seconds))
    return lane.run(coroutine, timeout_seconds=timeout_seconds, jid=jid)


async def _with_timeout(coroutine: Coroutine[Any, Any, Any], timeout_seconds: float | None) -> Any:
    """Await ``coroutine``; JobTimeout when it ran past ``timeout_seconds``: cancelled at the
    deadline when it awaits, or, when it blocked the loop past the deadline and returned before
    the loop could cancel it (a ``time.sleep`` in ``async def``), failed when it returns: its
    result is not kept, as a sync job interrupted at its timeout would have none."""
    if timeout_seconds is None:
        return await coroutine
    deadline = asyncio.timeout(timeout_seconds)
    try:
        async with deadline:
            result = await coroutine
    except TimeoutError:
        if deadline.expired():  # ours, not a TimeoutError the job raised itself
            raise JobTimeout(f"the job ran past its timeout of {timeout_seconds:g} s and was cancelled") from None
        raise
    when = deadline.when()
    if when is not None and asyncio.get_running_loop().time() > when:
        raise JobTimeout(
            f"the job ran past its timeout of {timeout_seconds:g} s blocking its event loop (a blocking call in async def "
            "perform: wrap it in asyncio.to_thread or sync_to_async), so it could not be cancelled; it is failed, its result not kept"
        )
    return result


class DaemonThreadExecutor(ThreadPoolExecutor):
    """The loop's default executor: a ``ThreadPoolExecutor`` by type (asyncio accepts nothing
    else) and by contract (threads started on demand up to ``max_workers``, reused when idle),
    whose ``submit`` runs calls on daemon threads of its own."""

    def __init__(self, *, max_workers: int, thread_name_prefix: str) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)  # its own threads never start
        self._daemon_work: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]]] = queue.SimpleQueue()
        self._daemon_idle = threading.Semaphore(0)
        self._daemon_lock = threading.Lock()
        self._daemon_threads = 0

    def submit(self, fn: Callable[Params, Returned], /, *args: Params.args, **kwargs: Params.kwargs) -> Future[Returned]:
        future: Future[Returned] = Future()
        self._daemon_work.put((future, partial(fn, *args, **kwargs)))
        if not self._daemon_idle.acquire(blocking=False):
            with self._daemon_lock:
                start = self._daemon_threads < self._max_workers
                if start:
                    self._daemon_threads += 1
                    name = f"{self._thread_name_prefix}-{self._daemon_threads}"
            if start:
                threading.Thread(target=self._run_daemon, name=name, daemon=True).start()
        return future

    def _run_daemon(self) -> None:
        while True:
            future, call = self._daemon_work.get()
            if future.set_running_or_notify_cancel():
                try:
                    result = call()
                except BaseException as exc:  # noqa: BLE001  # handed to the awaiting coroutine, as ThreadPoolExecutor does
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            self._daemon_idle.release()


class AsyncLane(Component):
    """One process's event loop thread and the threads of its running async jobs."""

    thread_name = "event-loop"
    join_seconds = CANCEL_GRACE_SECONDS  # for the loop to stop once its jobs are cancelled

    def __init__(self, *, concurrency: int, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(clock=clock)
        self.concurrency = concurrency
        self._slots = threading.Semaphore(concurrency)
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(
            DaemonThreadExecutor(max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="jobsapp.async-io")
        )
        self._work: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._threads_lock = threading.Lock()
        self._threads = 0
        self._idle_threads = 0
        self._running = 0  # jobs submitted and not finished (under _threads_lock)
        self._none_running = threading.Event()  # set while _running is 0
        self._none_running.set()
        self._tasks: set[asyncio.Task[Any]] = set()  # the loop thread's only
        self._cancelled = threading.Event()  # set at the shutdown deadline
        self._jobs_lock = threading.Lock()
        self._job_tasks: dict[str, asyncio.Task[Any]] = {}  # jid -> its running task (under _jobs_lock)
        self._cancel_requests: dict[str, float] = {}  # jid -> when its cancel was asked (monotonic), oldest first
        self.cancelled_total = 0
        self._pseudo_ids = itertools.count(PSEUDO_THREAD_ID_BASE)

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        super().start()
        _started_lanes.add(self)

    def log_tasks(self) -> None:
        """Log each running async job's await chain, asked of the loop (at most 1 s)."""
        if not self._loop.is_running():
            return

        async def describe() -> list[str]:
            return ["\n".join(_await_chain(task.get_coro())) for task in self._tasks]

        try:
            chains = asyncio.run_coroutine_threadsafe(describe(), self._loop).result(1.0)
        except TimeoutError:  # the loop did not run our coroutine: a job blocks it
            logger.warning("event loop: no answer within 1 s; a job is blocking it (see the jobsapp.event-loop thread's stack)")
            return
        for chain in chains:
            logger.warning("async job awaiting:\n%s", chain)

    def _run(self) -> None:
        self._loop.run_forever()

    def wait_idle(self, deadline: float) -> bool:
        """Wait until no async job runs, or until ``deadline`` (monotonic); whether none runs."""
        return self.clock.wait(self._none_running, deadline - self.clock.monotonic())

    def stop(self, deadline: float | None = None) -> None:
        """Wait for the running jobs until ``deadline``, cancel those still running (their threads
        park until the process exits: the manager puts their jobs back, nothing files them), and
        stop the loop."""
        if deadline is not None:
            self.wait_idle(deadline)
        if self.cancel_running():
            logger.warning("shutdown: async jobs still running at the deadline were cancelled")
        super().stop()

    def _wake(self) -> None:
        if self._thread is not None:  # stops the loop once it runs, if it does not yet
            self._loop.call_soon_threadsafe(self._loop.stop)

    def cancel_running(self) -> int:
        """At the shutdown deadline: cancel every running job's coroutine (their threads park
        until the process exits; the manager has put the jobs back) and give the loop
        ``CANCEL_GRACE_SECONDS`` for their clean-up. Returns how many were cancelled."""
        self._cancelled.set()
        if self._thread is None or not self._loop.is_running():
            return 0

        async def cancel_all() -> int:
            tasks = [task for task in self._tasks if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=CANCEL_GRACE_SECONDS)
            return len(tasks)

        try:
            return asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(CANCEL_GRACE_SECONDS + 1)
        except TimeoutError:  # a job ignoring its cancellation: its thread parks all the same
            logger.warning("async jobs did not finish cancelling within %.0f s", CANCEL_GRACE_SECONDS)
            return len(self._tasks)

    def cancel(self, jid: str) -> bool:
        """Cancel the async job ``jid``: its coroutine is cancelled and the job ends with
        JobCancelled (True when it is running here), else the jid is remembered so the job ends
        with JobCancelled, unstarted, when it comes (False)."""
        with self._jobs_lock:
            cancellation.remember(self._cancel_requests, jid, asked_at=self.clock.monotonic())
            task = self._job_tasks.get(jid)
            if task is None:
                return False
            self.cancelled_total += 1
        self._loop.call_soon_threadsafe(task.cancel)  # a task that finished meanwhile ignores it
        return True

    # --- for the manager ---------------------------------------------------------------

    def new_pseudo_thread_id(self) -> int:
        """The busy-set key of one async job run."""
        return next(self._pseudo_ids)

    def acquire_slot(self, timeout_seconds: float) -> bool:
        """Take one of ``concurrency`` slots (True), or False after ``timeout_seconds``."""
        return self._slots.acquire(timeout=timeout_seconds)

    def submit(self, work: Callable[[], None]) -> None:
        """Run ``work`` (a job, start to finish) in a lane thread; the caller holds a slot, which
        is released when ``work`` returns. ``work`` must not raise."""

        def run_then_release() -> None:
            try:
                work()
            finally:
                with self._threads_lock:
                    self._running -= 1
                    if not self._running:
                        self._none_running.set()
                self._slots.release()

        with self._threads_lock:
            self._running += 1
            self._none_running.clear()
            start_thread = self._idle_threads == 0 and self._threads < self.concurrency
            if start_thread:
                self._threads += 1
            else:
                self._idle_threads -= 1
            number = self._threads
        self._work.put(run_then_release)
        if start_thread:
            threading.Thread(target=self._thread_loop, name=f"jobsapp.async-{number}", daemon=True).start()

    def _thread_loop(self) -> None:
        _current.lane = self
        # asgiref's marker of "a sync thread serving this loop": async_to_sync in this thread
        # schedules on our loop, and thread-sensitive sync_to_async calls come back here
        SyncToAsync.threadlocal.main_event_loop = self._loop
        SyncToAsync.threadlocal.main_event_loop_pid = os.getpid()
        while True:
            work = self._work.get()
            try:
                work()
            except Exception:  # an engine bug around a job (the manager catches the job's own): it stays in flight for recovery
                logger.exception("async lane: unexpected error around a job")
            with self._threads_lock:
                self._idle_threads += 1

    # --- in a lane thread --------------------------------------------------------------

    def run(self, coroutine: Coroutine[Any, Any, Any], *, timeout_seconds: float | None, jid: str = "") -> Any:
        """Await ``coroutine`` on the loop from this lane thread (which serves the coroutine's
        thread-sensitive sync calls meanwhile); its result, or its exception (JobCancelled when
        ``cancel(jid)`` cancelled it)."""

        async def supervised() -> Any:
            task = asyncio.current_task()  # the task asgiref created on our loop for this call
            if task is not None:
                self._tasks.add(task)
            asked_before = False
            if jid:
                with self._jobs_lock:
                    asked_before = jid in self._cancel_requests
                    if not asked_before and task is not None:
                        self._job_tasks[jid] = task
            try:
                if asked_before:
                    coroutine.close()
                    raise JobCancelled("the job was cancelled before it started")
                return await _with_timeout(coroutine, timeout_seconds)
            except asyncio.CancelledError:
                if jid and not self._cancelled.is_set():
                    with self._jobs_lock:
                        asked = jid in self._cancel_requests
                    if asked:  # ours: the job ends cancelled, never retried
                        raise JobCancelled() from None
                raise
            finally:
                if task is not None:
                    self._tasks.discard(task)
                if jid:
                    with self._jobs_lock:
                        if self._job_tasks.get(jid) is task:
                            del self._job_tasks[jid]

        if self._cancelled.is_set():  # stopping for good: the manager puts this job back
            coroutine.close()
            self._park()
        try:
            return async_to_sync(supervised)()
        except asyncio.CancelledError:
            if self._cancelled.is_set():
                self._park()
            raise  # the job cancelled itself: a failure like any other

    def _park(self) -> None:
        """Never return: the job was cancelled at the shutdown deadline and put back on its
        queue; nothing may file it in retry too. The thread is a daemon: it ends with the process."""
        threading.Event().wait()
