"""Scenario 9: the dead set does not grow without bound.

Given more permanently failing jobs than the dead set keeps (50,000),
When workers run them all, Then the dead set holds exactly DEAD_MAX_JOBS (10,000) entries, the
newest ones, and every job ran: the ones trimmed away are the oldest deaths, by design (as
Sidekiq's DeadSet trims), and nothing else is missing.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.faults.jobs import ATTEMPTS, FailForeverLedgerJob
from tests.faults.ledger import check
from tests.workers import wait_until

pytestmark = pytest.mark.slow

JOBS = 50_000
DEAD_MAX_JOBS = 10_000


def test_dead_set_is_trimmed_to_its_cap(redis_server, redis, ledger, start_worker, measure):
    ids = [f"s9-{index}" for index in range(JOBS)]
    FailForeverLedgerJob.perform_bulk([[ledger_id] for ledger_id in ids])
    started = time.monotonic()
    worker = start_worker(["-P", "2", "-c", "10"])
    wait_until(lambda: redis.get("stat:failed") == str(JOBS).encode(), timeout_seconds=240, message="every job failed")
    elapsed = time.monotonic() - started
    worker.stop()
    report = check(redis, ledger, ids)
    size = redis.zcard("dead")
    measure("9 dead set growth", jobs=JOBS, dead_entries=size, trimmed=len(report.lost), seconds=elapsed)
    assert size == DEAD_MAX_JOBS
    assert ledger.hlen(ATTEMPTS) == JOBS and not report.never_ran
    assert not report.misplaced
    assert len(report.lost) == JOBS - DEAD_MAX_JOBS  # trimmed: the oldest deaths
    assert report.count("dead") == DEAD_MAX_JOBS
    newest = json.loads(redis.zrange("dead", -1, -1)[0])
    assert newest["error_class"] == "tests.faults.jobs.LedgerFailure"
