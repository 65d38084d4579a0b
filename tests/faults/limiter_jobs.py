"""Ledger jobs under limiters, for the fault scenarios 16-18 (imported by ``tests/faults/jobs.py``
so workers know them). Each records in the ledger Redis, like ``jobs.py``'s:

- ``ledger:attempts`` / ``ledger:done`` HASH id -> times ``perform`` started / returned;
- ``ledger:started_at`` / ``ledger:finished_at`` HASH id -> wall-clock time inside the limiter;
- ``ledger:ticks`` LIST: each step of work inside scenario 20's limiter.
"""

from __future__ import annotations

import json
import os
import random
import time

from jobsapp import Job, limiter, sidekiq_options
from tests.faults.jobs import ATTEMPTS, DONE, ledger_client

STARTED_AT = "ledger:started_at"
FINISHED_AT = "ledger:finished_at"

#: One slot, across every process (scenario 18).
SERIAL = limiter.concurrent("s18-serial", 1, lock_timeout=60)
#: Four admissions per sliding 2 s, never waiting in the job: a refusal reschedules (scenario 18).
WINDOW = limiter.window("s18-window", 4, 2, wait_timeout=0)
#: Three slots whose locks outlive the test, so a leaked slot stays visible (scenario 17).
TIMED = limiter.concurrent("s17-timed", 3, lock_timeout=600)


class SerialLedgerJob(Job):
    """Sleeps ``sleep_ms`` inside the one-slot limiter, recording when it entered and left."""

    def perform(self, ledger_id, sleep_ms):
        ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        with SERIAL:
            ledger_client().hset(STARTED_AT, ledger_id, time.time())
            time.sleep(sleep_ms / 1000)
            ledger_client().hset(FINISHED_AT, ledger_id, time.time())
        ledger_client().hincrby(DONE, ledger_id, 1)


class WindowLedgerJob(Job):
    """Enters the rate limiter at once or is rescheduled; records when the window admitted it
    (the Redis server's clock)."""

    def perform(self, ledger_id):
        ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        with WINDOW as permit:
            ledger_client().hset(STARTED_AT, ledger_id, permit.acquired_at)
        ledger_client().hincrby(DONE, ledger_id, 1)


def _spin(seconds: float) -> None:
    """Busy Python code: an asynchronous JobTimeout lands in it at once, wherever it is."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


@sidekiq_options(timeout=0.05, retry=0)
class TimedOutInLimiterJob(Job):
    """Spins a random time, enters the three-slot limiter and spins again: its 0.05 s timeout
    lands before, inside ``acquire``, inside the block or inside ``__exit__``, by chance."""

    def perform(self, ledger_id, seed):
        ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        chance = random.Random(seed)
        _spin(chance.uniform(0.0, 0.06))
        with TIMED:
            _spin(chance.uniform(0.0, 0.03))
        _spin(chance.uniform(0.0, 0.03))
        ledger_client().hincrby(DONE, ledger_id, 1)


#: Two slots across every process; waits in the job for a slot; locks that outlive the test (scenario 20).
PAIR = limiter.concurrent("s20-pair", 2, lock_timeout=120, wait_timeout=60)
#: Scenario 20: LIST of [ledger id, attempt, pid, epoch time], one per step of work inside PAIR.
TICKS = "ledger:ticks"
#: The length of one step of work inside PAIR.
STEP_SECONDS = 0.05


class PairLedgerJob(Job):
    """Does ``steps`` steps of work (50 ms each) inside the two-slot limiter, recording each step:
    a job paused mid-way does the steps it has left once it runs again."""

    def perform(self, ledger_id, steps):
        attempt = ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        with PAIR:
            for _ in range(steps):
                ledger_client().rpush(TICKS, json.dumps([ledger_id, attempt, os.getpid(), time.time()]))
                time.sleep(STEP_SECONDS)
        ledger_client().hincrby(DONE, ledger_id, 1)
