"""The clock the engine's loops read and wait on, injected so tests advance time instead of sleeping.

``Clock`` is three calls: ``monotonic()`` (intervals, deadlines), ``time()`` (epoch seconds
written to Redis) and ``wait(event, seconds)`` (sleep until ``seconds`` have passed or ``event``
is set, whichever comes first; returns whether it is set). ``SYSTEM_CLOCK`` is the real one and
every component's default; tests pass a manual clock (tests/manual_clock.py) whose waits end
when the test advances it. The Redis server's clock (``TIME``) is not this clock: what is due is
judged by the server, so hosts with skewed clocks agree (scheduler.py, periodic.py).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for intervals and deadlines)."""

    def time(self) -> float:
        """Epoch seconds (for what is written to Redis)."""

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait until ``seconds`` have passed or ``event`` is set; returns whether it is set."""


class SystemClock:
    """The real clock: ``time.monotonic``, ``time.time`` and ``Event.wait``."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


SYSTEM_CLOCK: Clock = SystemClock()
