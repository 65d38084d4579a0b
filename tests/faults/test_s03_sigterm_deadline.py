"""Scenario 3: SIGTERM while jobs run longer than the shutdown timeout.

Given a worker (``-t 2``) whose ten threads run jobs that outlive the timeout, some of which raise
right around the deadline, and more jobs queued behind them, When it gets SIGTERM, Then it exits
within the timeout plus a few seconds; the unfinished jobs are back at the front of their queue
and run exactly once more after a restart; a job that raised at the deadline is in exactly one
place (queue or retry, never both); nothing is lost.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import ATTEMPTS, DONE, LedgerJob, RaiseAtLedgerJob
from tests.faults.ledger import check, ledger_id_of
from tests.workers import wait_until

pytestmark = pytest.mark.slow

TIMEOUT_SECONDS = 2.0
RAISE_OFFSETS_SECONDS = (-0.3, -0.1, 0.0, 0.05, 0.1, 0.25)


def test_sigterm_with_jobs_longer_than_the_timeout(redis_server, redis, ledger, start_worker, measure):
    worker = start_worker(["-c", "10", "-t", str(TIMEOUT_SECONDS)], overrides=FAST_LIVENESS)
    term_at = time.time() + 1.5
    sleepers = [f"s3-sleep-{index}" for index in range(4)]
    raisers = [f"s3-raise-{index}" for index in range(len(RAISE_OFFSETS_SECONDS))]
    waiting = [f"s3-queued-{index}" for index in range(20)]
    # Given ten long jobs running: four that sleep 30 s, six that raise around the deadline
    LedgerJob.perform_bulk([[ledger_id, 30_000, True] for ledger_id in sleepers])
    RaiseAtLedgerJob.perform_bulk(
        [[ledger_id, term_at + TIMEOUT_SECONDS + offset] for ledger_id, offset in zip(raisers, RAISE_OFFSETS_SECONDS, strict=True)]
    )
    wait_until(lambda: ledger.hlen(ATTEMPTS) == 10, timeout_seconds=10, message="the ten long jobs started")
    # and twenty short jobs queued behind them
    LedgerJob.perform_bulk([[ledger_id, 0] for ledger_id in waiting])
    # When SIGTERM arrives
    time.sleep(max(0.0, term_at - time.time()))
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.process is not None
    worker.process.wait(timeout=TIMEOUT_SECONDS + 15)
    exit_seconds = time.monotonic() - signalled
    # Then it exited within the timeout plus a few seconds
    assert exit_seconds < TIMEOUT_SECONDS + 3, worker.output[-3000:]
    assert worker.process.returncode == 0
    report = check(redis, ledger, [*sleepers, *raisers, *waiting])
    report.assert_clean(allowed_places=("queue", "retry"), must_run=False)
    assert all(report.places[ledger_id] == ["queue"] for ledger_id in sleepers + waiting)
    raised_in_time = [ledger_id for ledger_id in raisers if report.places[ledger_id] == ["retry"]]
    # And the unfinished jobs are at the front (right end) of the queue, before the short ones
    queue = [ledger_id_of(raw) for raw in redis.lrange("queue:default", 0, -1)]
    unfinished = len(queue) - len(waiting)
    assert set(queue[-unfinished:]) <= set(sleepers + raisers)
    assert set(queue[: len(waiting)]) == set(waiting)
    assert redis.llen(f"jobsapp:inflight:{worker.identity}") == 0
    # When a worker runs again, every job finishes; the interrupted ones ran once more
    restarted = start_worker(["-c", "10", "-t", "5"], overrides=FAST_LIVENESS)
    wait_until(lambda: ledger.hlen(DONE) == 30, timeout_seconds=30, message="every job finished")
    restarted.stop()
    report = check(redis, ledger, [*sleepers, *raisers, *waiting])
    measure(
        "3 SIGTERM past the timeout",
        timeout_seconds=TIMEOUT_SECONDS,
        exit_seconds=exit_seconds,
        requeued_unfinished=unfinished,
        raised_before_deadline=len(raised_in_time),
        lost=len(report.lost),
        duplicates=report.duplicates,
    )
    report.assert_clean()
    assert report.duplicates == 0
    assert all(report.attempts[ledger_id] == 2 for ledger_id in sleepers + raisers)
