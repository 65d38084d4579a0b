"""``celery.contrib.testing.worker``: run a worker inside the calling process, as Celery's tests do.

    from jobsapp.celery.contrib.testing.worker import start_worker

    with start_worker(app, concurrency=2) as worker:
        assert add.delay(2, 2).get(timeout=10) == 4

``start_worker`` runs the engine's worker, the one ``runworkers`` runs in each of its processes
(reliable fetch from Redis, processor threads, heartbeat, scheduler, recovery), on threads of this
process, against the Redis the project's settings name. What Celery's test worker gives a test
holds here for the same reason: ``task_received`` receivers connected in the test run,
``celery.worker.state`` shows what the worker took and finished, and its log records reach the
test's log capture. Only the process's own signal handling is left out (the worker is stopped
when the block ends) and a worker the fleet declares dead stops instead of exiting the process.

The worker takes the app's default queue (``task_default_queue``, ``"default"``) unless
``queues`` says otherwise. It is registered in the process list like any other worker
(``app.control.inspect()`` sees it), and with ``perform_ping_check`` the block starts only once
the worker ran a ``celery.ping`` task. Leaving the block stops it as TERM stops ``runworkers``:
no new task is taken, running ones get ``shutdown_timeout`` seconds, what is left goes back to
its queue.

Celery's ``pool`` and ``loglevel`` are accepted: the worker always runs its tasks on
``concurrency`` threads, and logging is the project's (pytest's capture sees every record).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .... import connection
from ....worker import aio
from ....worker.launcher import Components, WorkerOptions
from ....worker.launcher import WorkerProcess as _EngineProcess
from ....worker.manager import Manager
from ....worker.timeouts import Watchdog

if TYPE_CHECKING:
    import redis

logger = logging.getLogger("jobsapp.celery.testing")

#: How long a worker may take to register itself before ``start_worker`` gives up.
START_TIMEOUT_SECONDS = 30.0


class WorkerStartError(RuntimeError):
    """The worker thread ended or did not register before it took any task."""


class TestWorkController:
    """The worker ``start_worker`` yields (Celery's name): its identity, hostname and options."""

    __test__ = False  # not a test class, though its name says Test (as Celery marks it)

    def __init__(self, process: _ThreadProcess, thread: threading.Thread) -> None:
        self._process = process
        self._thread = thread

    @property
    def identity(self) -> str:
        return self._process.identity

    @property
    def hostname(self) -> str:
        return self._process.hostname

    @property
    def concurrency(self) -> int:
        return self._process.options.concurrency

    @property
    def queues(self) -> list[str]:
        return list(self._process.options.queue_order.names)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def active(self) -> int:
        """How many tasks the worker runs now (read from its threads, not from a heartbeat)."""
        manager = self._process.manager
        return len(manager.busy()) if manager is not None else 0

    def stop(self) -> None:
        """Stop as TERM stops a worker; returns once it has."""
        self._process.on_signal("TERM")
        self._thread.join()


class _ThreadProcess(_EngineProcess):
    """A worker process's components run on threads of the caller's process."""

    def __init__(self, options: WorkerOptions, *, outbox_relay: bool) -> None:
        super().__init__(options)
        self.failure: BaseException | None = None
        self.outbox_relay = outbox_relay
        self.manager: Manager | None = None

    def build(self, client: redis.Redis) -> Components:
        components = super().build(client)
        self.manager = components.manager
        if not self.outbox_relay:  # it reads the database from its own thread (see start_worker)
            components.relay = None
        return components

    def fence(self, reason: str, *, watchdog: Watchdog, async_lane: aio.AsyncLane, manager: Manager) -> None:
        """Declared dead by the fleet (its heartbeat was missing too long): another process owns its
        jobs now. A worker process would exit; this one interrupts its jobs and stops, and leaves
        the test process running."""
        manager.fence()
        watchdog.expire_leases()
        async_lane.cancel_running()
        logger.error("the test worker %s was declared dead (%s): it stops taking tasks", self.identity, reason)
        self.on_signal("TERM")

    def run_in_thread(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # surfaced by start_worker (at start) or logged (later)
            self.failure = exc
            logger.exception("the test worker %s stopped on an error", self.identity)


def _registered(identity: str) -> bool:
    """Whether the worker is on the process list; a Redis that does not answer is waited out."""
    from .... import api
    from ....errors import RedisUnavailable

    try:
        return any(process.identity == identity for process in api.ProcessSet.all())
    except RedisUnavailable:
        return False


@contextmanager
def start_worker(
    app: Any,
    concurrency: int = 1,
    pool: str = "solo",
    loglevel: str | int = "error",
    logfile: str | None = None,
    perform_ping_check: bool = True,
    ping_task_timeout: float = 10.0,
    shutdown_timeout: float = 10.0,
    queues: list[str] | None = None,
    outbox_relay: bool = False,
    **kwargs: Any,
) -> Iterator[TestWorkController]:
    """A worker on threads of this process for the block (see the module header). The outbox
    relay (``JOBSAPP["OUTBOX"]``: it pushes what a commit could not) runs only with
    ``outbox_relay``: it reads the database from its own thread, which pytest-django allows only
    to a test marked ``django_db(transaction=True)``; a commit pushes its jobs itself."""
    from . import tasks

    default_queue = str(app.conf.get("task_default_queue") or "default") if app is not None else "default"
    options = WorkerOptions(
        queues=list(queues or [default_queue]), concurrency=max(1, int(concurrency)), processes=1, timeout_seconds=float(shutdown_timeout)
    )
    process = _ThreadProcess(options, outbox_relay=outbox_relay)
    thread = threading.Thread(target=process.run_in_thread, name=f"jobsapp.celery.testing worker {process.identity}", daemon=True)
    controller = TestWorkController(process, thread)
    thread.start()
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not _registered(process.identity):
            if not thread.is_alive():
                raise WorkerStartError(f"the test worker stopped before it took any task: {process.failure!r}") from process.failure
            if time.monotonic() > deadline:
                raise WorkerStartError(
                    f"the test worker did not register within {START_TIMEOUT_SECONDS:g} s (Redis at {connection.describe()})"
                )
            time.sleep(0.02)
        if perform_ping_check:
            answer = tasks.ping.apply_async(queue=options.queue_order.names[0]).get(timeout=ping_task_timeout)
            if answer != "pong":
                raise WorkerStartError(f"the test worker answered the ping with {answer!r}")
        yield controller
    finally:
        controller.stop()
