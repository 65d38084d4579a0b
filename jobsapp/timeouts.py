"""Job timeouts: ``sidekiq_options(timeout=seconds)`` raising ``JobTimeout`` inside a running job.

This module validates the option (``timeout_seconds``) when a class is declared and when a job is
pushed, so a bad value is a clear error before anything is written; the worker reads it again
from the payload (a job pushed by another client) before the job runs.

No thread and no Redis of its own in this part: a pure function on the payload.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: The payload field (and sidekiq_options key) of a job's timeout, in seconds.
TIMEOUT_KEY = "timeout"


def positive_seconds(value: object, *, option: str) -> float:
    """``value`` as float seconds; ValueError naming ``option`` unless it is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{option} must be a positive number of seconds, not {value!r}")
    return float(value)


def timeout_seconds(item: Mapping[str, Any]) -> float | None:
    """The job's timeout in seconds, None when it has none (the option absent or null).

    ValueError when it is not a positive number of seconds: refused at push, and a payload that
    reaches a worker with one anyway (another client wrote it) is parked in the dead set with
    this message rather than run without the limit it asked for."""
    value = item.get(TIMEOUT_KEY)
    if value is None:
        return None
    return positive_seconds(value, option="timeout")
