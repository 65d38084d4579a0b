"""A clock the test moves (``advance``), for in-process tests of the engine's threads.

It implements jobsapp.clock.Clock. A component's thread that waits on it blocks until the test
advances the clock past the end of its wait, or the component is stopped: no test sleeps for
the intervals it tests (a heartbeat every 5 s is tested in milliseconds). ``settle`` is how a
test knows a thread has done its round: it returns once the thread waits again.
"""

from __future__ import annotations

import threading
import time

#: A wait nobody advances ends after this many real seconds (a broken test fails, never hangs).
REAL_SECONDS_LIMIT = 30.0


class ManualClock:
    def __init__(self, *, monotonic: float = 1000.0, epoch: float = 1_800_000_000.0, auto_advance: bool = False) -> None:
        #: Each wait moves the clock by its own length and returns at once (for code that waits
        #: in the test's own thread, such as ``call_with_retry``).
        self.auto_advance = auto_advance
        self._now = monotonic
        self._epoch_at_start = epoch
        self._start = monotonic
        self._condition = threading.Condition()
        #: Every wait asked for, in seconds, in order (a backoff's schedule, a poll interval).
        self.waits: list[float] = []

    def monotonic(self) -> float:
        with self._condition:
            return self._now

    def time(self) -> float:
        with self._condition:
            return self._epoch_at_start + (self._now - self._start)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        give_up = time.monotonic() + REAL_SECONDS_LIMIT
        with self._condition:
            deadline = self._now + seconds
            self.waits.append(seconds)
            if self.auto_advance:
                self._now = deadline
            self._condition.notify_all()
            # an Event cannot notify this condition: look at it every few milliseconds
            while not event.is_set() and self._now < deadline and time.monotonic() < give_up:
                self._condition.wait(0.005)
        return event.is_set()

    def advance(self, seconds: float) -> None:
        with self._condition:
            self._now += seconds
            self._condition.notify_all()

    def settle(self, waits: int, *, timeout_seconds: float = 10.0) -> None:
        """Block until ``waits`` waits have been asked for in all (a thread finished its round)."""
        give_up = time.monotonic() + timeout_seconds
        with self._condition:
            while len(self.waits) < waits:
                remaining = give_up - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{len(self.waits)} waits after {timeout_seconds} s, expected {waits}: {self.waits}")
                self._condition.wait(remaining)

    def advance_and_settle(self, seconds: float) -> None:
        """Move the clock and wait until the waiting thread has done its round and waits again."""
        count = len(self.waits)
        self.advance(seconds)
        self.settle(count + 1)
