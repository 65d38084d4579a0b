"""Scenario 17: jobs timing out inside a concurrent limiter leave no slot held.

Given 100 jobs with ``timeout=0.05`` that enter ``concurrent("s17-timed", 3, lock_timeout=600)``
at random moments of their 0.05 s (so JobTimeout lands before the limiter, inside ``acquire``
after the grant, inside the block, or inside ``__exit__`` before the release), When a worker of
ten threads has run them all, Then no slot of the limiter is held: 0 leaked permits, where each
leak would stay held for its 600 s lock timeout.
"""

from __future__ import annotations

import time

import pytest

from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import DONE
from tests.faults.limiter_jobs import TimedOutInLimiterJob
from tests.workers import wait_until

pytestmark = pytest.mark.slow

JOBS = 100
HOLDERS = "jobsapp:limiter:s17-timed:holders"


def test_jobs_timing_out_inside_a_limiter_leak_no_slot(redis, ledger, start_worker, measure):
    # Given 100 jobs that time out around their limiter, and a worker of ten threads
    TimedOutInLimiterJob.perform_bulk([[f"s17-{index}", index] for index in range(JOBS)])
    worker = start_worker(["-c", "10"], overrides=FAST_LIVENESS)
    # When it has run them all (each in the dead set, or done; none queued, scheduled or in flight)
    wait_until(
        lambda: (
            redis.zcard("dead") + ledger.hlen(DONE) >= JOBS
            and redis.llen("queue:default") == 0
            and redis.zcard("schedule") == 0
            and redis.llen(f"jobsapp:inflight:{worker.identity}") == 0
        ),
        timeout_seconds=120,
        message="every job ran",
    )
    time.sleep(1.0)
    wait_until(lambda: int(redis.hget(worker.identity, "busy") or 0) == 0, timeout_seconds=10, message="the worker is idle")
    # Then no slot is held by anyone
    leaked = redis.zcount(HOLDERS, f"({time.time()}", "+inf")
    timed_out = redis.zcard("dead")
    measure("17 timeouts inside a limiter", jobs=JOBS, timed_out=timed_out, leaked_permits=leaked)
    assert timed_out > 0, "the scenario makes jobs time out"
    assert leaked == 0
