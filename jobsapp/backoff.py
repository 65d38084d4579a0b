"""One outage, one warning: the capped backoff and the logging of every "Redis is down" loop.

A worker never dies because Redis went away: each engine thread that talks to Redis catches the
errors of one attempt, tells its ``Backoff`` (``failed``), waits the delay it gets back, and
tells it again when an attempt works (``succeeded``). The ``Backoff`` owns what is logged:

- the first failure of an outage: one WARNING naming the loop and the error (an unexpected,
  non-Redis error: one ERROR with its traceback), never one line per attempt;
- the first success after it: one INFO with the number of failed attempts;
- the delay schedule: 0.1 s, 0.2 s, 0.4 s ... doubling up to ``cap_seconds`` (5 s: Redis back
  means work resumes within 5 s plus a reconnect), each with +-20 % jitter so the threads of
  many processes do not retry in lockstep.

Users: the scheduler, periodic and sweeper loops (component.py's ``PollingComponent``), the
heartbeat, the results writer, the manager's fetcher and acker, the launcher's start-up waits,
and ``call_with_retry`` (one operation retried through an outage). Waiting goes through the
injected clock (clock.py), so a test advances time instead of sleeping.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import TypeVar

from .clock import SYSTEM_CLOCK, Clock
from .connection import REDIS_ERRORS

T = TypeVar("T")


class Backoff:
    """The state of one loop's outage (how many attempts in a row failed) and its log lines."""

    def __init__(
        self,
        what: str,
        *,
        logger: logging.Logger,
        base_seconds: float = 0.1,
        cap_seconds: float = 5.0,
        rng: random.Random | None = None,
        clock: Clock = SYSTEM_CLOCK,
        outage: str = "Redis unavailable",
    ) -> None:
        #: Names the loop in the log lines ("fetch", "scheduler", ...).
        self.what = what
        #: What the warning says is wrong (the launcher names the server it waits for).
        self.outage = outage
        self.logger = logger
        self.base_seconds = base_seconds
        self.cap_seconds = cap_seconds
        self.rng = rng or random.Random()
        self.clock = clock
        #: Failed attempts in a row: 0 when Redis answers.
        self.failures = 0

    @property
    def in_outage(self) -> bool:
        return self.failures > 0

    def next_delay(self) -> float:
        """The delay after the current number of failures: doubling from the base, capped, with
        +-20 % jitter."""
        delay = min(self.cap_seconds, self.base_seconds * (2 ** min(max(self.failures, 1) - 1, 16)))
        return delay * self.rng.uniform(0.8, 1.2)

    def failed(self, error: BaseException, *, unexpected: bool = False) -> float:
        """Count a failed attempt; log it when it starts an outage. ``unexpected`` (not a Redis
        error: a bug) logs the traceback. Returns the seconds to wait before the next attempt."""
        self.failures += 1
        if self.failures == 1:
            if unexpected:
                self.logger.error("%s: unexpected error (%s); retrying with backoff", self.what, error, exc_info=error)
            else:
                self.logger.warning("%s: %s (%s); retrying with backoff", self.what, self.outage, error)
        return self.next_delay()

    def succeeded(self) -> None:
        """An attempt worked: log the end of an outage (with its failed attempts), reset."""
        if self.failures:
            self.logger.info("%s: Redis is back after %d failed attempts", self.what, self.failures)
            self.failures = 0

    def pause(self, error: BaseException, stop: threading.Event, *, unexpected: bool = False) -> bool:
        """``failed``, then wait its delay or until ``stop`` is set; returns whether it is set."""
        return self.clock.wait(stop, self.failed(error, unexpected=unexpected))


def call_with_retry(
    operation: Callable[[], T],
    *,
    what: str,
    logger: logging.Logger,
    stop: threading.Event | None = None,
    backoff: Backoff | None = None,
) -> T:
    """Run ``operation`` until Redis answers; raises the last error once ``stop`` is set."""
    backoff = backoff or Backoff(what, logger=logger)
    stop = stop or threading.Event()  # never set: retry until Redis answers
    while True:
        try:
            result = operation()
        except REDIS_ERRORS as exc:
            if stop.is_set():
                raise
            backoff.pause(exc, stop)
            continue
        backoff.succeeded()
        return result
