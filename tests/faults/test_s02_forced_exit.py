"""Scenario 2: the process dies (``os._exit``, no cleanup at all) at each step of a job's path.

Given ledger jobs and a worker armed with ``JOBSAPP_FAULT_POINT`` (jobsapp/faults.py), When it
reaches the point and exits, and a new worker starts in the same slot, Then every job finishes,
none is lost or left anywhere, and duplicates are bounded by what the dead process held.
"""

from __future__ import annotations

import time

import pytest

from jobsapp import faults
from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import DONE, FlakyLedgerJob, LedgerJob
from tests.faults.ledger import check
from tests.workers import wait_until

pytestmark = pytest.mark.slow

JOBS = 200

# point -> (job class, hit that exits, how the jobs are enqueued)
CASES = {
    "after_fetch": (LedgerJob, 3, "now"),
    "in_perform": (LedgerJob, 40, "now"),
    "after_perform_before_ack": (LedgerJob, 40, "now"),
    "during_retry_write": (FlakyLedgerJob, 10, "now"),
    "after_retry_write": (FlakyLedgerJob, 10, "now"),
    "during_scheduler_move": (LedgerJob, 1, "scheduled"),
}


def test_every_fault_point_is_tested():
    assert set(CASES) == set(faults.POINTS)


@pytest.mark.parametrize("point", list(CASES))
def test_forced_exit_at_each_step_loses_nothing(point, redis_server, redis, ledger, start_worker, measure):
    job_class, hit, mode = CASES[point]
    ids = [f"s2-{point}-{index}" for index in range(JOBS)]
    args = [[ledger_id, 10] if job_class is LedgerJob else [ledger_id] for ledger_id in ids]
    # Given a worker that will os._exit the <hit>th time it reaches the point
    armed = start_worker(
        ["-c", "5", "-t", "2"], overrides=FAST_LIVENESS, env={"JOBSAPP_FAULT_POINT": point, "JOBSAPP_FAULT_AFTER": str(hit)}
    )
    if mode == "scheduled":
        job_class.set(wait=0.3).perform_bulk(args)
    else:
        job_class.perform_bulk(args)
    # When it gets there
    assert armed.process is not None
    wait_until(lambda: armed.process.poll() is not None, timeout_seconds=30, message=f"the worker died at {point}")
    died_at = time.monotonic()
    assert armed.process.returncode == faults.EXIT_CODE, armed.output[-2000:]
    assert f"at {point}" in armed.output
    held = redis.llen(f"jobsapp:inflight:{armed.identity}")
    # And a new worker starts in its slot
    with_restart = start_worker(["-c", "5", "-t", "2"], overrides=FAST_LIVENESS)
    wait_until(lambda: redis.llen(f"jobsapp:inflight:{armed.identity}") == 0, timeout_seconds=30, message="recovered")
    recovery_seconds = time.monotonic() - died_at
    wait_until(lambda: ledger.hlen(DONE) == JOBS, timeout_seconds=60, message="every job finished")
    with_restart.stop()
    # Then each job is done and nowhere else
    report = check(redis, ledger, ids)
    measure(
        f"2 os._exit {point}",
        jobs=JOBS,
        in_flight_at_exit=held,
        lost=len(report.lost),
        duplicates=report.duplicates,
        recovery_seconds=recovery_seconds,
    )
    report.assert_clean()
    # only jobs that had finished but were not acknowledged can run twice
    assert report.duplicates <= 5 + 20
    assert not redis.exists(f"jobsapp:inflight:{armed.identity}")
