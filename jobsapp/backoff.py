"""Capped exponential backoff for Redis outages, used by every engine thread.

A worker never dies because Redis went away: each thread that talks to Redis catches the
connection errors, logs once per outage (not once per attempt), sleeps 0.1 s, 0.2 s, ... up to
``cap_seconds`` (5 s: Redis back means work resumes within 5 s plus a reconnect), and resumes.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import TypeVar

from .connection import REDIS_ERRORS

T = TypeVar("T")


class Backoff:
    def __init__(self, *, base_seconds: float = 0.1, cap_seconds: float = 5.0, rng: random.Random | None = None) -> None:
        self.base_seconds = base_seconds
        self.cap_seconds = cap_seconds
        self.rng = rng or random.Random()
        self.failures = 0

    def next_delay(self) -> float:
        """The next sleep: doubling from the base, capped, with +-20% jitter."""
        self.failures += 1
        delay = min(self.cap_seconds, self.base_seconds * (2 ** min(self.failures - 1, 16)))
        return delay * self.rng.uniform(0.8, 1.2)

    def reset(self) -> None:
        self.failures = 0


def call_with_retry(
    operation: Callable[[], T],
    *,
    what: str,
    logger: logging.Logger,
    stop: threading.Event | None = None,
    backoff: Backoff | None = None,
) -> T:
    """Run ``operation`` until Redis answers; raises the last error once ``stop`` is set."""
    backoff = backoff or Backoff()
    while True:
        try:
            result = operation()
        except REDIS_ERRORS as exc:
            if stop is not None and stop.is_set():
                raise
            delay = backoff.next_delay()
            if backoff.failures == 1:
                logger.warning("Redis unavailable while %s (%s); retrying with backoff", what, exc)
            if stop is not None:
                stop.wait(delay)
            else:
                threading.Event().wait(delay)
            continue
        if backoff.failures:
            logger.info("Redis is back; %s succeeded after %d attempts", what, backoff.failures + 1)
            backoff.reset()
        return result
