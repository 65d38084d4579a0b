"""A skewed wall clock for one worker process (scenario 8): what a host with a wrong clock sees.

``time.time`` is replaced before the engine is imported, so every ``created_at``, ``enqueued_at``,
heartbeat ``beat`` and retry score this process computes is off by the offset. Monotonic clocks
and the Redis server's ``TIME`` are untouched, as they would be on such a host.
"""

from __future__ import annotations

import time


def skew_wall_clock(offset_seconds: float) -> None:
    real_time = time.time
    real_time_ns = time.time_ns

    def skewed_time() -> float:
        return real_time() + offset_seconds

    def skewed_time_ns() -> int:
        return real_time_ns() + int(offset_seconds * 1e9)

    time.time = skewed_time
    time.time_ns = skewed_time_ns
