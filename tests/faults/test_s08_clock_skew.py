"""Scenario 8: hosts whose clocks are 300 s apart.

Given two worker processes, one whose wall clock runs 300 s ahead and one 300 s behind (see
tests/faults/clock.py), When they share jobs that run longer than the heartbeat TTL and jobs
scheduled a few seconds ahead by a producer with the right time, Then neither recovers the other's
live jobs (liveness is a Redis TTL, judged on the server's clock) and no scheduled job runs
before its time (due-ness is judged by Redis ``TIME``).
"""

from __future__ import annotations

import time

import pytest

from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import ATTEMPTS, DONE, LedgerJob
from tests.faults.ledger import check
from tests.workers import wait_until

pytestmark = pytest.mark.slow

SKEW_SECONDS = 300


def test_skewed_clocks_recover_nothing_early_and_run_nothing_early(redis_server, redis, ledger, start_worker, measure):
    ahead = start_worker(["-c", "6", "-t", "5"], overrides=FAST_LIVENESS, env={"JOBSAPP_TEST_CLOCK_OFFSET_SECONDS": str(SKEW_SECONDS)})
    behind = start_worker(["-c", "6", "-t", "5"], overrides=FAST_LIVENESS, env={"JOBSAPP_TEST_CLOCK_OFFSET_SECONDS": str(-SKEW_SECONDS)})
    # (their clocks really are off: the heartbeat's "beat" is their wall time)
    assert float(redis.hget(ahead.identity, "beat")) - time.time() > SKEW_SECONDS - 10
    assert time.time() - float(redis.hget(behind.identity, "beat")) > SKEW_SECONDS - 10
    # Given jobs that run longer than the heartbeat TTL (3 s) on both hosts
    long_ids = [f"s8-long-{index}" for index in range(10)]
    LedgerJob.perform_bulk([[ledger_id, 4500] for ledger_id in long_ids])
    # and jobs scheduled 2.5 s ahead by a producer with the right time
    scheduled_ids = [f"s8-at-{index}" for index in range(20)]
    due = time.time() + 2.5
    for ledger_id in scheduled_ids:
        LedgerJob.perform_at(due, ledger_id)
    # When time passes: the scheduled jobs must not start before they are due
    wait_until(lambda: ledger.hlen(ATTEMPTS) >= 10, timeout_seconds=10, message="the long jobs started")
    while time.time() < due - 0.2:
        assert not any(ledger.hget(ATTEMPTS, ledger_id) for ledger_id in scheduled_ids), "a scheduled job ran early"
        time.sleep(0.05)
    wait_until(lambda: all(ledger.hget(DONE, ledger_id) for ledger_id in scheduled_ids), timeout_seconds=5)
    lateness = time.time() - due
    wait_until(lambda: ledger.hlen(DONE) == len(long_ids) + len(scheduled_ids), timeout_seconds=20, message="every job finished")
    ahead.stop()
    behind.stop()
    # Then each ran once: nobody took over a live host's jobs
    report = check(redis, ledger, long_ids + scheduled_ids)
    recovered = sum("recovered in-flight jobs" in worker.output for worker in (ahead, behind))
    measure("8 clocks 300 s apart", lost=len(report.lost), duplicates=report.duplicates, live_jobs_recovered=recovered,
            scheduled_all_done_after_due_seconds=lateness)  # fmt: skip
    report.assert_clean()
    assert recovered == 0
    assert report.duplicates == 0
    assert all(report.attempts[ledger_id] == 1 for ledger_id in long_ids)
