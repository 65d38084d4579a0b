"""Scenario 18: a job refused by a concurrent limiter runs as soon as the slot frees.

Given 4 jobs of N seconds (2 here; ``S18_JOB_SECONDS=6`` for the issue's measurement) under
``concurrent("s18-serial", 1, lock_timeout=60)`` and two worker processes of two threads each,
When they run them, Then the four finish within 1.2 x the ideal 4 N seconds plus a small
constant (a refused job is parked on the limiter and woken by the release, not rescheduled
after the holder's lock timeout), they never overlap, and the limiter's refusal counter counts
refused jobs, not attempts. The same for a rate limiter: a job it refuses comes back when the
window has room again, not later.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import DONE
from tests.faults.limiter_jobs import FINISHED_AT, STARTED_AT, SerialLedgerJob, WindowLedgerJob
from tests.workers import wait_until

pytestmark = pytest.mark.slow

JOB_SECONDS = float(os.environ.get("S18_JOB_SECONDS", "2"))
JOBS = 4
#: Seconds on top of 1.2 x the ideal: process start-up and a scheduler poll per hand-over.
SLACK_SECONDS = 3.0
WINDOW_JOBS = 20


def test_jobs_under_a_one_slot_limiter_run_back_to_back_across_processes(redis, ledger, start_worker, measure):
    # Given two worker processes of two threads each, started and idle
    first = start_worker(["-c", "2"], overrides=FAST_LIVENESS)
    second = start_worker(["-c", "2"], overrides=FAST_LIVENESS)
    wait_until(lambda: len({first.identity, second.identity}) == 2, timeout_seconds=20, message="both workers registered")
    # When 4 jobs of JOB_SECONDS under a one-slot limiter are pushed
    pushed = time.time()
    SerialLedgerJob.perform_bulk([[f"s18-{index}", int(JOB_SECONDS * 1000)] for index in range(JOBS)])
    ideal = JOBS * JOB_SECONDS
    wait_until(lambda: ledger.hlen(DONE) == JOBS, timeout_seconds=ideal * 4 + 60, message="all jobs ran")
    finished = max(float(value) for value in ledger.hvals(FINISHED_AT))
    elapsed = finished - pushed
    # Then they ran one at a time, back to back: within 1.2 x the ideal plus a small constant
    spans = sorted((float(ledger.hget(STARTED_AT, key)), float(ledger.hget(FINISHED_AT, key))) for key in ledger.hkeys(STARTED_AT))
    gaps = [round(spans[index + 1][0] - spans[index][1], 2) for index in range(len(spans) - 1)]
    refused = int(redis.hget("jobsapp:limiter:s18-serial", "over_limit") or 0)
    measure("18 concurrent limit 1", jobs=JOBS, job_seconds=JOB_SECONDS, seconds=round(elapsed, 1), ideal=ideal, gaps=gaps, refused=refused)
    assert all(gap >= -0.05 for gap in gaps), f"never two inside the limiter at once: {gaps}"
    assert elapsed <= 1.2 * ideal + SLACK_SECONDS, f"{elapsed:.1f} s for an ideal of {ideal:.0f} s; gaps {gaps}"
    # and the refusal counter counts jobs refused (each rescheduled at most a few times), not polls
    assert refused <= JOBS * 3


def test_jobs_refused_by_a_rate_limiter_come_back_when_the_window_has_room(redis, ledger, start_worker, measure):
    # Given two worker processes of four threads each, started and idle
    first = start_worker(["-c", "4"], overrides=FAST_LIVENESS)
    second = start_worker(["-c", "4"], overrides=FAST_LIVENESS)
    wait_until(lambda: len({first.identity, second.identity}) == 2, timeout_seconds=20, message="both workers registered")
    # When 20 jobs under window("s18-window", 4, 2), which never wait in the job, are pushed
    WindowLedgerJob.perform_bulk([[f"s18-window-{index}"] for index in range(WINDOW_JOBS)])
    wait_until(lambda: ledger.hlen(DONE) == WINDOW_JOBS, timeout_seconds=120, message="all jobs ran")
    # Then they were admitted in five windows of 2 s, each as soon as it had room (plus the
    # reschedule's jitter and one scheduler poll), not after a backoff
    admitted = sorted(float(value) for value in ledger.hvals(STARTED_AT))
    span = admitted[-1] - admitted[0]
    reschedules = int(redis.hget("jobsapp:limiter:s18-window", "over_limit") or 0)
    ideal = (WINDOW_JOBS / 4 - 1) * 2.0
    measure("18 window 4 per 2 s", jobs=WINDOW_JOBS, seconds_first_to_last=round(span, 1), ideal=ideal, refused=reschedules)
    assert all(admitted[index + 4] - admitted[index] >= 2.0 for index in range(len(admitted) - 4)), "never more than 4 in 2 s"
    assert span <= ideal + 4.0  # four hand-overs, each late by at most a jitter and a scheduler poll
