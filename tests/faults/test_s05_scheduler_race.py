"""Scenario 5: five schedulers race over 10,000 scheduled and 10,000 retry jobs.

Given 20,000 due jobs in ``schedule`` and ``retry``, When five worker processes (each with its own
scheduler thread, polling every 50 ms) start at once, Then every job is moved into its queue
exactly once and runs exactly once: no job is lost, none is duplicated.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.faults.conftest import SOAK
from tests.faults.jobs import DONE, LedgerJob
from tests.faults.ledger import check
from tests.workers import wait_until

pytestmark = pytest.mark.slow

PER_SET = 10_000


def test_five_schedulers_move_each_job_exactly_once(redis_server, redis, ledger, start_worker, measure):
    # Given 10,000 scheduled and 10,000 retry jobs, all due
    now = time.time()
    scheduled = [f"s5-schedule-{index}" for index in range(PER_SET)]
    retries = [f"s5-retry-{index}" for index in range(PER_SET)]
    pipe = redis.pipeline(transaction=False)
    for index, ledger_id in enumerate(scheduled):
        item = {
            "class": LedgerJob.wire_name(),
            "args": [ledger_id],
            "queue": "default",
            "jid": f"{index:024x}",
            "retry": True,
            "created_at": now,
        }
        pipe.zadd("schedule", {json.dumps(item, separators=(",", ":")): now - 1 - index / PER_SET})
    for index, ledger_id in enumerate(retries):
        item = {
            "class": LedgerJob.wire_name(),
            "args": [ledger_id],
            "queue": "default",
            "jid": f"{PER_SET + index:024x}",
            "retry": True,
            "created_at": now,
            "retry_count": 0,
            "failed_at": now,
            "error_message": "x",
            "error_class": "E",
        }
        pipe.zadd("retry", {json.dumps(item, separators=(",", ":")): now - 1 - index / PER_SET})
    pipe.execute()
    # When five processes start and race
    overrides = {"SCHEDULER_POLL_INTERVAL_SECONDS": 0.05}
    started = time.monotonic()
    workers = [start_worker(["-c", "5" if not SOAK else "10"], overrides=overrides) for _ in range(5)]
    wait_until(lambda: ledger.hlen(DONE) == 2 * PER_SET, timeout_seconds=120, message="every job ran")
    elapsed = time.monotonic() - started
    time.sleep(0.5)
    for worker in workers:
        worker.stop()
    # Then each ran exactly once and none is left anywhere
    report = check(redis, ledger, scheduled + retries)
    measure("5 five schedulers", jobs=2 * PER_SET, lost=len(report.lost), duplicates=report.duplicates, seconds=elapsed)
    report.assert_clean()
    assert report.duplicates == 0
    assert redis.zcard("schedule") == 0 and redis.zcard("retry") == 0
    assert int(redis.get("stat:processed")) == 2 * PER_SET
