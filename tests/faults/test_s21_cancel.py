"""Scenario 21: cancelling jobs with a real worker process (``jobsapp.api.cancel``).

Each test pushes a job, waits until the worker runs it, cancels it from this process (the request
travels through Redis pub/sub to the worker's cancel listener), and reads what became of it: the
ledger (did its code go on?), its result record (``failed``, reason ``cancelled``), the sets (never
retried, never dead), the limiter's holders and the batch's counts.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from jobsapp import api, results
from jobsapp.api import CancelOutcome
from jobsapp.batch import Batch
from tests.faults.cancel_jobs import (
    AFTER_SLEEP,
    STARTED_AT,
    STOPPED_AT,
    AwaitingJob,
    PermitHoldingJob,
    ShortJob,
    SleepingJob,
    SpinningJob,
)
from tests.faults.jobs import ATTEMPTS, DONE
from tests.workers import wait_until

pytestmark = pytest.mark.slow

#: Generous: the job must stop long before it would have ended by itself (60 s); how fast it
#: stops is measured by bench/cancel_latency.py, not asserted here.
STOPS_WITHIN_SECONDS = 20.0


def _record(jid: str) -> results.JobResult:
    record = results.get(jid)
    assert record is not None, f"no result record for {jid}"
    return record


def _ended_cancelled(jid: str) -> bool:
    record = results.get(jid)
    return record is not None and record.status == results.FAILED and record.reason == "cancelled"


def _nothing_left(redis, worker) -> None:
    assert redis.zcard("retry") == 0, "a cancelled job is never retried"
    assert redis.zcard("dead") == 0, "a cancelled job is not sent to the dead set"
    inflight = f"jobsapp:inflight:{worker.identity}"
    wait_until(lambda: redis.llen(inflight) == 0, timeout_seconds=30, message="the cancelled job was acknowledged")


def _cancel_when_started(ledger, ledger_id: str, jid: str) -> float:
    wait_until(lambda: ledger.hexists(STARTED_AT, ledger_id), timeout_seconds=30, message=f"{ledger_id} started")
    asked_at = time.time()
    answer = api.cancel(jid)
    assert answer.outcome is CancelOutcome.CANCELLING, answer.message
    return asked_at


def test_a_job_looping_in_python_is_interrupted_and_ends_cancelled(redis, ledger, start_worker):
    # Given a worker running a job that loops in Python code for a minute
    worker = start_worker(["-c", "2"])
    jid = SpinningJob.perform_async("spin", 60)
    # When it is cancelled
    asked_at = _cancel_when_started(ledger, "spin", jid)
    # Then its code stops at once, it never returns normally, and it ends cancelled
    wait_until(lambda: ledger.hexists(STOPPED_AT, "spin"), timeout_seconds=STOPS_WITHIN_SECONDS, message="the loop stopped")
    assert float(ledger.hget(STOPPED_AT, "spin")) - asked_at < STOPS_WITHIN_SECONDS
    wait_until(lambda: _ended_cancelled(jid), timeout_seconds=30, message="its record says cancelled")
    assert not ledger.hexists(DONE, "spin")
    assert ledger.hget(ATTEMPTS, "spin") == b"1"
    assert _record(jid).error_class == "jobsapp.errors.JobCancelled"
    _nothing_left(redis, worker)
    # And cancelling it again is a no-op that says it has ended
    again = api.cancel(jid)
    assert again.outcome is CancelOutcome.ENDED
    assert "already ended" in again.message


def test_an_async_job_has_its_coroutine_cancelled(redis, ledger, start_worker):
    # Given a worker running an async job awaiting in a loop
    worker = start_worker(["-c", "1"])
    jid = AwaitingJob.perform_async("await", 60)
    # When it is cancelled
    _cancel_when_started(ledger, "await", jid)
    # Then its coroutine stops and the job ends cancelled, once
    wait_until(lambda: ledger.hexists(STOPPED_AT, "await"), timeout_seconds=STOPS_WITHIN_SECONDS, message="the coroutine stopped")
    wait_until(lambda: _ended_cancelled(jid), timeout_seconds=30, message="its record says cancelled")
    assert not ledger.hexists(DONE, "await")
    assert ledger.hget(ATTEMPTS, "await") == b"1"
    _nothing_left(redis, worker)


def test_a_job_in_a_blocking_call_stops_when_the_call_returns(redis, ledger, start_worker):
    # Given a job inside one blocking time.sleep(3)
    worker = start_worker(["-c", "1"])
    jid = SleepingJob.perform_async("sleep", 3)
    # When it is cancelled during the sleep
    _cancel_when_started(ledger, "sleep", jid)
    # Then the sleep is not cut short, but nothing after it runs: the job ends cancelled
    wait_until(lambda: _ended_cancelled(jid), timeout_seconds=15, message="its record says cancelled")
    started, stopped = float(ledger.hget(STARTED_AT, "sleep")), float(ledger.hget(STOPPED_AT, "sleep"))
    assert stopped - started >= 2.9, "the C call ran to its end"
    assert not ledger.hexists(AFTER_SLEEP, "sleep"), "JobCancelled landed as the call returned"
    assert not ledger.hexists(DONE, "sleep")
    _nothing_left(redis, worker)


def test_a_cancelled_job_gives_its_limiter_permit_back(redis, ledger, start_worker):
    # Given a job holding the only permit of a concurrent limiter
    worker = start_worker(["-c", "2"])
    jid = PermitHoldingJob.perform_async("holder", 60)
    wait_until(lambda: ledger.hexists(STARTED_AT, "holder"), timeout_seconds=30, message="the holder is inside the limiter")
    assert redis.zcard("jobsapp:limiter:s20-permit:holders") == 1
    # When it is cancelled
    api.cancel(jid)
    # Then the permit comes back, and the next job takes it and finishes
    wait_until(lambda: _ended_cancelled(jid), message="the holder ended cancelled")
    wait_until(lambda: redis.zcard("jobsapp:limiter:s20-permit:holders") == 0, message="the permit came back")
    PermitHoldingJob.perform_async("next", 0)
    wait_until(lambda: ledger.hexists(DONE, "next"), timeout_seconds=30, message="the next job took the permit")
    _nothing_left(redis, worker)


def test_a_cancelled_batch_member_counts_as_failed_and_the_batch_completes(redis, ledger, start_worker):
    # Given a batch of a short job and a long one
    worker = start_worker(["-c", "2"])
    batch = Batch(description="s20")
    with batch.jobs():
        ShortJob.perform_async("short", 1)
        long_jid = SpinningJob.perform_async("long", 60)
    wait_until(lambda: ledger.hexists(DONE, "short"), timeout_seconds=30, message="the short job finished")
    # When the long one is cancelled
    _cancel_when_started(ledger, "long", long_jid)
    # Then the batch completes, with the cancelled member failed
    wait_until(lambda: (status := batch.status()) is not None and status.complete, message="the batch completed")
    status = batch.status()
    assert status is not None
    assert (status.total, status.pending, status.failed) == (2, 0, 1)
    assert not status.success
    _nothing_left(redis, worker)


def test_a_waiting_job_is_removed_and_never_runs(redis, ledger, start_worker):
    # Given a worker, a job scheduled for later and one queued where the worker does not listen
    worker = start_worker(["-c", "1", "-q", "default"])
    scheduled = SpinningJob.perform_in(600, "scheduled", 1)
    queued = SpinningJob.set(queue="elsewhere").perform_async("queued", 1)
    # When both are cancelled
    answers = api.cancel_many([scheduled, queued])
    # Then both were removed and ended cancelled, and neither ever runs
    assert [answer.outcome for answer in answers] == [CancelOutcome.CANCELLED, CancelOutcome.CANCELLED]
    assert redis.zcard("schedule") == 0 and redis.llen("queue:elsewhere") == 0
    assert _ended_cancelled(scheduled) and _ended_cancelled(queued)
    assert not ledger.hexists(ATTEMPTS, "scheduled") and not ledger.hexists(ATTEMPTS, "queued")
    _nothing_left(redis, worker)


#: 200 in the suite (about 6 s); 1,000 with ``JOBSAPP_TEST_CANCEL_RACES=1000`` (about
#: 30 s), or ``bench.cancel_latency --races 1000``.
RACES = int(os.environ.get("JOBSAPP_TEST_CANCEL_RACES", "200"))


def test_a_cancel_racing_the_jobs_own_end_leaves_exactly_one_outcome(redis, ledger, start_worker, measure):
    # Given jobs that each spin a few milliseconds
    worker = start_worker(["-c", "2"])
    rng = random.Random(20)
    jids = []
    # When each is cancelled at a random moment around its end
    for index in range(RACES):
        jid = ShortJob.perform_async(f"race-{index}", rng.randint(3, 15))
        jids.append(jid)
        wait_until(
            lambda index=index: ledger.hexists(STARTED_AT, f"race-{index}"),
            timeout_seconds=30,
            interval_seconds=0.001,
            message=f"race-{index} started",
        )
        time.sleep(rng.uniform(0, 0.015))
        api.cancel(jid)
    # Then each job ended exactly once: succeeded, or cancelled (then its code may have reached
    # its last line, JobCancelled landing before perform returned); acknowledged once, never retried
    wait_until(lambda: all(_record(jid).status in results.FINISHED_STATUSES for jid in jids), timeout_seconds=60, message="all ended")
    succeeded = cancelled = cancelled_after_last_line = 0
    for index, jid in enumerate(jids):
        record, done = _record(jid), ledger.hget(DONE, f"race-{index}")
        assert ledger.hget(ATTEMPTS, f"race-{index}") == b"1", "never run twice"
        if record.status == results.SUCCEEDED:
            assert done == b"1"
            succeeded += 1
        else:
            assert (record.status, record.reason) == (results.FAILED, "cancelled")
            cancelled += 1
            cancelled_after_last_line += done == b"1"
    assert succeeded + cancelled == RACES
    assert succeeded and cancelled, "the cancels landed on both sides of the jobs' ends"
    wait_until(lambda: int(redis.get("stat:processed") or 0) == RACES, message="every job acknowledged and counted")
    assert int(redis.get("stat:processed")) == RACES, "each job counted once"
    assert int(redis.get("stat:failed") or 0) == cancelled, "each cancelled job counted failed once, no other"
    measure("21 cancel race", races=RACES, succeeded=succeeded, cancelled=cancelled, after_last_line=cancelled_after_last_line)
    _nothing_left(redis, worker)
