"""Ledger jobs for the fault scenarios. Each run writes to the ledger Redis (``$LEDGER_REDIS_URL``,
a server of its own, so killing or pausing the engine's Redis never touches the evidence):

- ``ledger:attempts`` HASH id -> times ``perform`` started;
- ``ledger:done`` HASH id -> times ``perform`` returned normally.

The first argument of every job is its ledger id; the checker (``tests.faults.ledger``) finds the
id wherever the job is (queue, schedule, retry, dead, in flight).
"""

from __future__ import annotations

import ctypes
import json
import os
import time

import redis

from jobsapp import Job, sidekiq_options

ATTEMPTS = "ledger:attempts"
DONE = "ledger:done"

_client: redis.Redis | None = None
_client_pid = 0


def ledger_client() -> redis.Redis:
    """One client per process (rebuilt after fork)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        _client = redis.Redis.from_url(os.environ["LEDGER_REDIS_URL"], socket_timeout=10)
        _client_pid = os.getpid()
    return _client


class LedgerFailure(Exception):
    """Raised on purpose by a ledger job told to fail."""


class LedgerJob(Job):
    """Records its attempt, sleeps ``sleep_ms`` (only on the first attempt when ``first_only``),
    and records that it finished."""

    def perform(self, ledger_id, sleep_ms=0, first_only=False):
        attempt = ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        if sleep_ms and (attempt == 1 or not first_only):
            time.sleep(sleep_ms / 1000)
        ledger_client().hincrby(DONE, ledger_id, 1)


class FlakyLedgerJob(Job):
    """Fails its first attempt (retried after 0.2 s), then succeeds."""

    @classmethod
    def sidekiq_retry_in(cls, count, exception):
        return 0.2

    def perform(self, ledger_id):
        attempt = ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        if attempt == 1:
            raise LedgerFailure(f"{ledger_id}: first attempt fails on purpose")
        ledger_client().hincrby(DONE, ledger_id, 1)


class RaiseAtLedgerJob(Job):
    """First attempt: runs until the epoch time ``raise_at``, then raises (retried after 0.2 s).
    Later attempts succeed at once."""

    @classmethod
    def sidekiq_retry_in(cls, count, exception):
        return 0.2

    def perform(self, ledger_id, raise_at):
        attempt = ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        if attempt == 1:
            time.sleep(max(0.0, raise_at - time.time()))
            raise LedgerFailure(f"{ledger_id}: raised at the shutdown deadline")
        ledger_client().hincrby(DONE, ledger_id, 1)


@sidekiq_options(retry=0, dead=True)
class FailForeverLedgerJob(Job):
    """Always fails; ``retry: 0`` sends it straight to the dead set."""

    def perform(self, ledger_id):
        ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        raise LedgerFailure(f"{ledger_id}: fails every time")


class SegfaultJob(Job):
    """Dereferences NULL: the whole worker process dies with SIGSEGV, every time it runs."""

    def perform(self, ledger_id):
        ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        ctypes.string_at(0)


@sidekiq_options(retry=0)
class MemoryHogJob(Job):
    """Asks for far more memory than the host has: MemoryError, straight to the dead set."""

    def perform(self, ledger_id):
        ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        hoard = bytearray(1 << 46)  # 64 TiB
        ledger_client().hincrby(DONE, ledger_id, len(hoard))


#: Scenario 13 (batches): HASH id -> epoch time a batch member first finished; LIST of callback runs.
FIRST_FINISHED = "ledger:first_finished"
BATCH_CALLBACKS = "ledger:batch_callbacks"


class BatchLedgerJob(Job):
    """A batch member: records its attempt, sleeps ``sleep_ms``, records that it finished (and
    when it first did)."""

    def perform(self, ledger_id, sleep_ms=0):
        ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        if sleep_ms:
            time.sleep(sleep_ms / 1000)
        ledger = ledger_client().pipeline(transaction=False)
        ledger.hsetnx(FIRST_FINISHED, ledger_id, repr(time.time()))
        ledger.hincrby(DONE, ledger_id, 1)
        ledger.execute()


class BatchCompleteLedgerJob(Job):
    """A batch's on_complete: records its run, the counts it was told, and when it started."""

    def perform(self, bid, counts):
        ledger_client().rpush(BATCH_CALLBACKS, json.dumps({"kind": "complete", "bid": bid, "counts": counts, "at": time.time()}))


class BatchSuccessLedgerJob(Job):
    """A batch's on_success: as ``BatchCompleteLedgerJob``."""

    def perform(self, bid, counts):
        ledger_client().rpush(BATCH_CALLBACKS, json.dumps({"kind": "success", "bid": bid, "counts": counts, "at": time.time()}))


from tracking import TrackedJob  # noqa: E402


class TrackedLedgerJob(TrackedJob):
    """A ledger job with task tracking (scenario 10)."""

    def perform(self, ledger_id, sleep_ms=0):
        ledger_client().hincrby(ATTEMPTS, ledger_id, 1)
        if sleep_ms:
            time.sleep(sleep_ms / 1000)
        ledger_client().hincrby(DONE, ledger_id, 1)


from tests.faults import cancel_jobs, limiter_jobs  # noqa: E402, F401  # the limiter and cancel scenarios' jobs, known to workers
