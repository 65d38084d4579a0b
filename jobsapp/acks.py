"""Holding a job's acknowledgement until what it wrote elsewhere is durable: ``hold_ack``.

Runs in a worker's processor threads. A server middleware that writes a job's outcome somewhere
else (tracking's database rows) must have it durable before the job is acknowledged: a job whose
ack reached Redis never runs again, so an outcome lost after that is lost for good. Waiting in
the job's own thread costs a thread per pending write; instead the middleware hands the wait to
the worker (``hold_ack(release)``): the processor thread takes its next job at once, and the
process's acker calls ``release(timeout_seconds)`` for every hold recorded before a round, and
acknowledges the round's jobs only then. A process that dies first has acknowledged nothing of
those jobs: they run again (at-least-once), and their outcome is written again.

Only a thread that collects holds (``collect``: the manager's processor threads, with reliable
fetch, whose acks the acker sends) accepts one; anywhere else ``hold_ack`` answers False and the
caller waits itself. No Redis keys.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: ``release(timeout_seconds) -> bool``: blocks until the held write is durable (True) or the
#: timeout passes (False: the job is acknowledged anyway, as a failed write would be).
Release = Callable[[float], bool]

_thread = threading.local()


def collect() -> None:
    """Make the calling thread accept holds (a worker's processor thread, once)."""
    _thread.holds = []


def stop_collecting() -> None:
    """The calling thread accepts no more holds (those it recorded are dropped)."""
    _thread.holds = None


def hold_ack(release: Release) -> bool:
    """Hold the acknowledgement of the job this thread is running until ``release`` returns;
    False when this thread does not collect holds (the caller must wait itself)."""
    holds: list[Release] | None = getattr(_thread, "holds", None)
    if holds is None:
        return False
    holds.append(release)
    return True


def take() -> list[Release]:
    """The holds this thread recorded since the last call (the acker's ``record``, in the thread)."""
    holds: list[Release] | None = getattr(_thread, "holds", None)
    if not holds:
        return []
    _thread.holds = []
    return holds
