"""Scenario 13: a batch whose worker is SIGKILLed mid-run counts each job once and fires its
callbacks once, after the last member finished.

A job that finished just before its process died was counted in its batch but not yet
acknowledged: it is recovered and runs again. Given a batch of short jobs drained by
``runworkers -P 2 -c 10``, When a child is SIGKILLed at 25, 50 and 75 % of the drain (its
supervisor restarts it), Then the batch's ``succeeded`` equals its total, ``pending`` is 0 (never
below), ``on_complete`` and ``on_success`` each ran exactly once, told ``succeeded == total``, and
each started after every member had finished once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest

from jobsapp.batch import Batch, BatchStatus
from tests.faults.conftest import FAST_LIVENESS, SOAK
from tests.faults.jobs import (
    BATCH_CALLBACKS,
    DONE,
    FIRST_FINISHED,
    BatchCompleteLedgerJob,
    BatchLedgerJob,
    BatchSuccessLedgerJob,
)
from tests.faults.test_s01_sigkill import children
from tests.workers import wait_until

pytestmark = pytest.mark.slow

JOBS = 10_000 if SOAK else 3_000
SLEEP_MS = 5
KILL_AT = (0.25, 0.50, 0.75)


def test_a_batch_counts_each_job_once_and_fires_after_the_last_one_despite_sigkills(redis_server, redis, ledger, start_worker, measure):
    # Given a batch of thousands of short jobs with both callbacks
    ids = [f"s13-{index}" for index in range(JOBS)]
    batch = Batch(on_complete=BatchCompleteLedgerJob, on_success=BatchSuccessLedgerJob, description="scenario 13")
    with batch.jobs():
        BatchLedgerJob.perform_bulk([[ledger_id, SLEEP_MS] for ledger_id in ids])
    # When two supervised processes drain it and a child is SIGKILLed at 25, 50 and 75 %
    worker = start_worker(["-P", "2", "-c", "10", "-t", "5"], overrides=FAST_LIVENESS)
    rng = random.Random(13)
    killed: set[int] = set()
    lowest_pending = JOBS
    for share in KILL_AT:
        wait_until(lambda share=share: ledger.hlen(FIRST_FINISHED) >= share * JOBS, timeout_seconds=120, message=f"{share:.0%} done")
        candidates = children(worker, redis, killed)
        if candidates:
            pid, _ = rng.choice(candidates)
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        lowest_pending = min(lowest_pending, int(redis.hget(f"jobsapp:batch:{batch.bid}", "pending") or 0))
    wait_until(lambda: ledger.hlen(FIRST_FINISHED) == JOBS, timeout_seconds=180, message="every member finished")
    wait_until(lambda: ledger.llen(BATCH_CALLBACKS) >= 2, timeout_seconds=60, message="both callbacks ran")
    time.sleep(2.0)  # time for a duplicate callback or a re-run member to show up
    worker.stop()
    # Then each member counted once, and each callback ran once, after the last member finished
    status = BatchStatus.read(batch.bid)
    callbacks = [json.loads(raw) for raw in ledger.lrange(BATCH_CALLBACKS, 0, -1)]
    last_member_finished = max(float(value) for value in ledger.hvals(FIRST_FINISHED))
    reruns = sum(int(value) for value in ledger.hvals(DONE)) - JOBS
    earliest_callback = min((callback["at"] for callback in callbacks), default=0.0)
    measure(
        "13 batch x SIGKILL",
        jobs=JOBS,
        kills=len(killed),
        reruns=reruns,
        succeeded=status.succeeded if status else None,
        pending=status.pending if status else None,
        callbacks=len(callbacks),
        callback_after_last_seconds=round(earliest_callback - last_member_finished, 3),
    )
    assert len(killed) == len(KILL_AT)
    assert status is not None
    assert (status.total, status.succeeded, status.pending, status.failed) == (JOBS, JOBS, 0, 0)
    assert lowest_pending >= 0
    assert sorted(callback["kind"] for callback in callbacks) == ["complete", "success"]
    assert all(callback["counts"] == {"total": JOBS, "succeeded": JOBS, "failed": 0} for callback in callbacks)
    assert earliest_callback >= last_member_finished
