"""The one lifecycle of the engine's long-running parts: ``start()``, ``quiet()``, ``stop(deadline)``.

A component owns one daemon thread named ``jobsapp.<thread_name>`` that runs ``_run``:

- ``start()`` starts the thread (a component may do a first step synchronously before, as the
  heartbeat's first beat);
- ``quiet()`` stops taking new work and keeps finishing what it holds (the manager puts its
  buffer back; a poller has nothing to quiet);
- ``stop(deadline)`` sets the stop event, wakes the thread (``_wake``, for a thread that waits on
  something else than the event) and joins it until ``deadline`` (a ``clock.monotonic()``
  time), at most ``join_seconds``: a thread stuck on a Redis call must not hold up a shutdown
  (it is a daemon and dies with the process).

Waits go through the injected clock (``self._wait(seconds)``, clock.py) so a stop wakes them at
once and tests advance time instead of sleeping. ``PollingComponent`` is the loop of the
scheduler, the periodic ticker, the heartbeat and the sweeper: call ``poll()``, wait the seconds it
returns, and through a Redis outage let one ``Backoff`` (backoff.py) log and pace the retries.
Start and shutdown order is the launcher's (launcher.py); the manager (manager.py) has the same
three calls around its many threads.
"""

from __future__ import annotations

import logging
import threading

from .backoff import Backoff
from .clock import SYSTEM_CLOCK, Clock
from .connection import REDIS_ERRORS


class Component:
    #: The thread's name, after "jobsapp.".
    thread_name = "component"
    #: The longest stop() waits for the thread.
    join_seconds = 5.0

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"jobsapp.{self.thread_name}", daemon=True)
        self._thread.start()

    def quiet(self) -> None:
        """Stop taking new work. Nothing to do for a component that only moves or reports."""

    def stop(self, deadline: float | None = None) -> None:
        """End the thread: wake it and join it until ``deadline`` (monotonic), at most ``join_seconds``."""
        self._stop.set()
        self._wake()
        if self._thread is None:
            return
        timeout = self.join_seconds
        if deadline is not None:
            timeout = max(0.0, min(timeout, deadline - self.clock.monotonic()))
        self._thread.join(timeout)

    def _wake(self) -> None:
        """Wake a thread that waits on something other than the stop event (none by default)."""

    def _wait(self, seconds: float) -> bool:
        """Wait ``seconds`` or until stopped; returns whether stopped."""
        return self.clock.wait(self._stop, seconds)

    def _run(self) -> None:
        raise NotImplementedError


class PollingComponent(Component):
    """A thread that calls ``poll()`` until stopped, waiting the seconds each poll returns.

    An outage error (``outage_errors``: Redis away or refusing) or an unexpected one (a bug, a
    hostile entry: the thread lives on) goes to the component's ``Backoff``, which logs it once per
    outage; the next poll comes after the backoff's delay, or after ``retry_seconds()`` for a
    component that keeps its own rhythm through an outage (the heartbeat, the sweeper)."""

    #: The errors that mean "Redis is down or refusing": logged once per outage, retried.
    outage_errors: tuple[type[BaseException], ...] = REDIS_ERRORS
    logger = logging.getLogger("jobsapp.component")

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(clock=clock)
        self.backoff = Backoff(self.thread_name, logger=self.logger, clock=clock)

    def poll(self) -> float:
        """One round of work; returns the seconds to wait before the next."""
        raise NotImplementedError

    def first_delay_seconds(self) -> float:
        """The wait before the first poll (0: at once)."""
        return 0.0

    def retry_seconds(self, backoff_seconds: float) -> float:
        """The wait after a failed poll: the backoff's delay by default."""
        return backoff_seconds

    def poll_once(self) -> float:
        """One poll with the outage handling of the loop; returns the seconds to wait next."""
        try:
            delay = self.poll()
        except self.outage_errors as exc:  # each step of a poll is atomic: the next poll resumes
            return self.retry_seconds(self.backoff.failed(exc))
        except Exception as exc:  # noqa: BLE001  # a bug or a hostile entry: logged once, the thread lives on
            return self.retry_seconds(self.backoff.failed(exc, unexpected=True))
        self.backoff.succeeded()
        return delay

    def _run(self) -> None:
        delay = self.first_delay_seconds()
        while not self._wait(delay):
            delay = self.poll_once()
