"""Scenario 10: task tracking stays exact when jobs run more than once.

Given one task of 10,000 tracked jobs (2,000 in the fast run; ``Task.objects.launch``), a hundred of them delivered twice
on purpose, When 30 threads (``-P 3 -c 10``) run them while the processes keep dying after a job
has finished but before its ack (``JOBSAPP_FAULT_POINT=after_perform_before_ack``; the supervisor
restarts them, so those jobs run again), Then the ledger shows the duplicates, yet the task counts
each job exactly once: 10,000 finished, nothing left enqueued or working, one final status per
event, and the task finished once. Runs on the test database: a SQLite file, or PostgreSQL when
``$DATABASE_URL`` points at one (CI runs both).
"""

from __future__ import annotations

import json
import time

import pytest
from django.db import connection

from tests.faults.conftest import FAST_LIVENESS, SOAK
from tests.faults.jobs import DONE, TrackedLedgerJob
from tests.faults.ledger import check
from tests.workers import wait_until, worker_database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

JOBS = 10_000 if SOAK else 2_000
DELIVERED_TWICE = 100
FAULT_AFTER = 1_200 if SOAK else 300
CLIENT = "tracking.middleware.TrackingClientMiddleware"
SERVER = "tracking.middleware.TrackingServerMiddleware"


def test_duplicates_do_not_change_the_counts(redis_server, redis, ledger, start_worker, measure, settings):
    from jobsapp import middleware
    from tracking.models import Event, Task

    settings.JOBSAPP = {**settings.JOBSAPP, "CLIENT_MIDDLEWARE": [CLIENT], "SERVER_MIDDLEWARE": [SERVER]}
    settings.TRACKING = {"LAUNCH_INLINE_JOBS": JOBS}  # every job queued by launch itself, to duplicate some
    middleware.reset_chains()
    ids = [f"s10-{index}" for index in range(JOBS)]
    # Given one task of thousands of tracked jobs, a hundred of them in the queue twice
    task = Task.objects.launch(TrackedLedgerJob, [[ledger_id, 2] for ledger_id in ids], name="scenario 10")
    queued = redis.lrange("queue:default", -DELIVERED_TWICE, -1)
    assert len(queued) == DELIVERED_TWICE and redis.llen("queue:default") == JOBS
    redis.lpush("queue:default", *queued)
    # When 30 threads run them, processes dying now and then between perform and ack
    overrides = {**FAST_LIVENESS, "CLIENT_MIDDLEWARE": [CLIENT], "SERVER_MIDDLEWARE": [SERVER]}
    env = {
        "DATABASE_URL": worker_database_url(),
        "JOBSAPP_FAULT_POINT": "after_perform_before_ack",
        "JOBSAPP_FAULT_AFTER": str(FAULT_AFTER),
    }
    started = time.monotonic()
    worker = start_worker(["-P", "3", "-c", "10", "-t", "5"], overrides=overrides, env=env)

    def settled() -> bool:
        task.refresh_from_db()
        return task.finished_at is not None and redis.llen("queue:default") == 0

    wait_until(settled, timeout_seconds=180, interval_seconds=0.5, message="the task finished")
    elapsed = time.monotonic() - started
    time.sleep(1.0)  # late duplicates still running get their chance to miscount
    wait_until(lambda: not any(redis.llen(key) for key in redis.scan_iter(match="jobsapp:inflight:*")), timeout_seconds=30)
    worker.stop()
    # Then the ledger saw duplicates, and the task counts every job exactly once
    report = check(redis, ledger, ids)
    task.refresh_from_db()
    deaths = worker.output.count("os._exit(86)")
    measure(
        f"10 tracking under duplicates ({connection.vendor})",
        jobs=JOBS,
        duplicates=report.duplicates,
        process_deaths=deaths,
        lost=len(report.lost),
        counts=json.dumps(task.counts),
        seconds=elapsed,
    )
    report.assert_clean()
    assert report.duplicates >= DELIVERED_TWICE
    assert task.counts == {"enqueue": 0, "working": 0, "finish": JOBS, "failed": 0, "error": 0, "cancelled": 0}
    assert task.settled_count == JOBS and task.status == "finished"
    assert Event.objects.filter(task=task).count() == JOBS
    assert Event.objects.filter(task=task, status="finish").count() == JOBS
    assert int(ledger.hlen(DONE)) == JOBS
