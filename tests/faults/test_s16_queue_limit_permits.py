"""Scenario 16: the slot of a ``QUEUE_LIMITS`` queue follows its job through a deploy and a crash.

Given a queue capped at one job at once, whose slot's lock timeout is long (the default 600 s,
or 30 s), and a long job holding the slot:
(a) When its worker gets SIGTERM with ``-t 3`` (the job is put back unfinished) and a new worker
    starts, Then the put-back job runs again within seconds, and the job queued behind it too,
    not after the lock timeout;
(b) When the worker holding the slot is SIGKILLed while another worker waits on the queue, Then
    the slot comes back when the sweeper recovers the dead worker's jobs, well within the lock
    timeout, and both jobs run.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import ATTEMPTS, DONE, LedgerJob
from tests.workers import wait_until

pytestmark = pytest.mark.slow

CAPPED = {"QUEUE_LIMITS": {"capped": 1}}


def _push(ledger_id: str, sleep_ms: int) -> None:
    LedgerJob.set(queue="capped").perform_async(ledger_id, sleep_ms, True)  # sleeps on its first attempt only


def test_a_job_put_back_at_shutdown_gives_its_queue_slot_back(redis, ledger, start_worker, measure):
    # Given a queue capped at 1 (lock timeout 600 s) running a 30 s job, and a job queued behind it
    worker = start_worker(["-c", "2", "-q", "capped", "-t", "3"], overrides={**FAST_LIVENESS, **CAPPED})
    _push("s16-long", 30_000)
    wait_until(lambda: ledger.hget(ATTEMPTS, "s16-long") == b"1", timeout_seconds=15, message="the long job started")
    _push("s16-next", 0)
    # When the worker is stopped with TERM and -t 3 (the long job goes back unfinished)
    worker.signal(signal.SIGTERM)
    assert worker.process is not None
    worker.process.wait(timeout=15)
    assert redis.zcard("jobsapp:limiter:queue:capped:holders") == 0, "the put-back job's slot was released"
    # and a new worker starts
    restarted = time.monotonic()
    start_worker(["-c", "2", "-q", "capped"], overrides={**FAST_LIVENESS, **CAPPED})
    # Then the put-back job runs again and the next job runs, within seconds
    wait_until(
        lambda: ledger.hget(DONE, "s16-long") == b"1" and ledger.hget(DONE, "s16-next") == b"1",
        timeout_seconds=30,
        message="both jobs ran after the restart",
    )
    seconds = time.monotonic() - restarted
    measure("16a queue slot after TERM -t 3", seconds_to_both_jobs_after_restart=round(seconds, 1))
    assert seconds < 10


def test_a_killed_holders_queue_slot_comes_back_at_the_sweep(redis, ledger, start_worker, measure):
    # Given a queue capped at 1 with a 30 s lock timeout, its slot held by a 30 s job in worker A
    overrides = {**FAST_LIVENESS, **CAPPED, "QUEUE_LIMIT_LOCK_TIMEOUT_SECONDS": 30}
    holder = start_worker(["-c", "1", "-q", "capped"], overrides=overrides)
    _push("s16-held", 30_000)
    wait_until(lambda: ledger.hget(ATTEMPTS, "s16-held") == b"1", timeout_seconds=15, message="the long job started")
    # and worker B serving the same queue, with a job waiting for the slot
    start_worker(["-c", "2", "-q", "capped"], overrides=overrides)
    _push("s16-waiting", 0)
    time.sleep(1.0)
    # When worker A is SIGKILLed
    holder.kill()
    killed = time.monotonic()
    # Then B recovers the held job and its slot at the sweep, and runs both jobs long before the lock timeout
    wait_until(
        lambda: ledger.hget(DONE, "s16-held") == b"1" and ledger.hget(DONE, "s16-waiting") == b"1",
        timeout_seconds=60,
        message="both jobs ran after the kill",
    )
    seconds = time.monotonic() - killed
    measure("16b queue slot after SIGKILL", seconds_to_both_jobs_after_kill=round(seconds, 1), lock_timeout_seconds=30)
    assert seconds < 15
