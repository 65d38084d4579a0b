"""Jobs for the cancel scenarios (scenario 21; imported by ``tests/faults/jobs.py`` so workers know
them). Each records in the ledger Redis (``$LEDGER_REDIS_URL``):

- ``ledger:attempts`` / ``ledger:done`` HASH id -> times ``perform`` started / returned normally;
- ``ledger:started_at`` HASH id -> wall-clock time the job began its work;
- ``ledger:stopped_at`` HASH id -> wall-clock time its last Python line ran (a ``finally`` block:
  the moment JobCancelled reached it);

The loops and the blocking call run in a function of their own, so the ``finally`` that records
the stop is in a calling frame: CPython 3.13.0 does not run the handlers of the very frame an
asynchronous exception is raised in (a loop's own ``try``/``finally``), only its callers'.
- ``ledger:after_sleep`` HASH id -> 1 when code after a blocking call ran (it must not).
"""

from __future__ import annotations

import asyncio
import time

from jobsapp import Job, limiter, sidekiq_options
from tests.faults.jobs import ATTEMPTS, DONE, ledger_client
from tracking import TrackedJob

STARTED_AT = "ledger:started_at"
STOPPED_AT = "ledger:stopped_at"
AFTER_SLEEP = "ledger:after_sleep"

#: One slot, across every process: a cancelled holder must give it back.
PERMIT = limiter.concurrent("s20-permit", 1, lock_timeout=600)


def _spin(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    counter = 0
    while time.monotonic() < deadline:
        counter += 1


def _sleep_then_note(ledger_id: str, seconds: float) -> None:
    time.sleep(seconds)
    ledger_client().hset(AFTER_SLEEP, ledger_id, 1)


def _started(ledger_id: str) -> None:
    ledger = ledger_client()
    ledger.hincrby(ATTEMPTS, ledger_id, 1)
    ledger.hset(STARTED_AT, ledger_id, time.time())


@sidekiq_options(retain=600)
class SpinningJob(Job):
    """A loop in Python code for up to ``seconds``."""

    def perform(self, ledger_id, seconds=60):
        _started(ledger_id)
        try:
            _spin(seconds)
        finally:
            ledger_client().hset(STOPPED_AT, ledger_id, time.time())
        ledger_client().hincrby(DONE, ledger_id, 1)


@sidekiq_options(retain=600)
class SleepingJob(Job):
    """One blocking ``time.sleep(seconds)`` (a C call: a cancel lands when it returns)."""

    def perform(self, ledger_id, seconds):
        _started(ledger_id)
        try:
            _sleep_then_note(ledger_id, seconds)
        finally:
            ledger_client().hset(STOPPED_AT, ledger_id, time.time())
        ledger_client().hincrby(DONE, ledger_id, 1)


@sidekiq_options(retain=600)
class AwaitingJob(Job):
    """An async job awaiting ``asyncio.sleep`` in a loop for up to ``seconds``."""

    async def perform(self, ledger_id, seconds=60):
        _started(ledger_id)
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        finally:
            ledger_client().hset(STOPPED_AT, ledger_id, time.time())
        ledger_client().hincrby(DONE, ledger_id, 1)


@sidekiq_options(retain=600)
class PermitHoldingJob(Job):
    """Spins inside the one-slot limiter for up to ``seconds``."""

    def perform(self, ledger_id, seconds=60):
        ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        with PERMIT:
            ledger_client().hset(STARTED_AT, ledger_id, time.time())
            _spin(seconds)
        ledger_client().hincrby(DONE, ledger_id, 1)


@sidekiq_options(retain=600)
class ShortJob(Job):
    """Spins ``milliseconds`` then returns: the race scenario's job, cancelled around its end."""

    def perform(self, ledger_id, milliseconds):
        _started(ledger_id)
        _spin(milliseconds / 1000)
        ledger_client().hincrby(DONE, ledger_id, 1)


class TrackedSpins(TrackedJob):
    """A tracked job spinning ``seconds`` in Python code: the tracked task cancel's job."""

    def perform(self, seconds):
        _spin(seconds)
