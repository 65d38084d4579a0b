"""Fault injection for the fault suite: kill this process (``os._exit``) at a named step.

Off unless ``$JOBSAPP_FAULT_POINT`` is set when the process starts; read once, at import. The
engine calls ``reach(name)`` only behind ``if faults.POINT:``, so with the variable unset a job's
path pays one global lookup of ``None`` per step and nothing else.

    JOBSAPP_FAULT_POINT=in_perform JOBSAPP_FAULT_AFTER=5 python manage.py runworkers

exits with code 86 the 5th time any thread reaches ``in_perform`` (``JOBSAPP_FAULT_AFTER``
defaults to 1). No cleanup runs: no ``finally``, no atexit, no last heartbeat, exactly like a
SIGKILL or a segfault at that line. The points, in a job's order:

- ``after_fetch``: jobs were moved into the in-flight list; none has started (manager fetcher);
- ``in_perform``: inside the server middleware chain, just before ``perform`` (processor);
- ``after_perform_before_ack``: ``perform`` returned; the ack is not sent yet (processor);
- ``during_retry_write``: the job failed; its retry/dead entry is about to be written (retry);
- ``after_retry_write``: that entry and the in-flight removal were just written (retry);
- ``during_scheduler_move``: a batch of due jobs was just moved into its queue (scheduler).

Points inside features, each tested by its own scenario (``FEATURE_POINTS``):

- ``chord_part_recorded``: a Celery chord header task's value was just recorded (and, for the
  last part, its callback job pushed); the task's job is not acknowledged yet;
- ``outbox_committed``: a transaction with an outbox entry committed; its push is not made yet
  (the web process killed right after COMMIT);
- ``outbox_relay_pushed``: the relay pushed an entry; its DELETE is not made yet.

Used by ``tests/faults`` only; never set it in production.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POINTS = (
    "after_fetch",
    "in_perform",
    "after_perform_before_ack",
    "during_retry_write",
    "after_retry_write",
    "during_scheduler_move",
)

#: Points in features' code; each has a scenario of its own (not scenario 2's ledger jobs).
FEATURE_POINTS = ("chord_part_recorded", "outbox_committed", "outbox_relay_pushed")

#: Exit code of a process killed by a fault point.
EXIT_CODE = 86

POINT: str | None = os.environ.get("JOBSAPP_FAULT_POINT") or None
if POINT is not None and POINT not in POINTS + FEATURE_POINTS:
    raise SystemExit(f"JOBSAPP_FAULT_POINT={POINT!r} is not one of {', '.join(POINTS + FEATURE_POINTS)}")

_after = int(os.environ.get("JOBSAPP_FAULT_AFTER") or 1)
_hits = 0
_lock = threading.Lock()


def reach(name: str) -> None:
    """Called at step ``name``; exits the process at the configured hit of the armed point."""
    global _hits
    if name != POINT:
        return
    with _lock:
        _hits += 1
        if _hits < _after:
            return
    sys.stderr.write(f"jobsapp.faults: os._exit({EXIT_CODE}) at {name} (hit {_hits}, pid {os.getpid()})\n")
    sys.stderr.flush()
    os._exit(EXIT_CODE)


def wrap(name: str, call: Callable[[], T]) -> Callable[[], T]:
    """``call`` preceded by ``reach(name)``: a point inside the server middleware chain."""

    def wrapped() -> T:
        reach(name)
        return call()

    return wrapped
