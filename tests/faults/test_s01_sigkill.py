"""Scenario 1: three worker processes x 10 threads draining thousands of jobs while one of them is
SIGKILLed at random every few seconds and restarted.

Given jobs in the ledger, When ``runworkers -P 3 -c 10`` drains them and a random child is killed
(its supervisor restarts it in the same slot), Then with reliable fetch no job is lost, none is
left anywhere, duplicates are counted, and each victim's in-flight jobs are back within seconds.
With Sidekiq's plain BRPOP fetch the same run loses jobs, which shows the checker can fail.
A second test kills unsupervised processes and leaves them dead: the orphan sweeper of the
survivors brings their jobs back once the heartbeat has expired.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest

from tests.faults.conftest import FAST_LIVENESS, SOAK
from tests.faults.jobs import ATTEMPTS, DONE, LedgerJob
from tests.faults.ledger import check
from tests.workers import wait_until

pytestmark = pytest.mark.slow

JOBS = 30_000 if SOAK else 3_000
SLEEP_MS = 50
KILL_FOR_SECONDS = 60.0 if SOAK else 6.0
KILL_EVERY_SECONDS = (2.0, 5.0) if SOAK else (1.0, 2.0)


def children(worker, redis, killed: set[int]) -> list[tuple[int, str]]:
    """(pid, identity) of the live children of a ``-P`` supervisor."""
    found = []
    for identity in redis.smembers("processes"):
        raw = redis.hget(identity, "info")
        if not raw:
            continue
        pid = json.loads(raw)["pid"]
        if pid != worker.pid and pid not in killed:
            found.append((pid, identity.decode()))
    return found


def drain_with_kills(worker, redis, ledger, *, rng: random.Random, reliable: bool) -> dict[str, float]:
    killed: set[int] = set()
    recoveries: list[float] = []
    in_flight_at_kill: list[int] = []
    wait_until(lambda: ledger.hlen(ATTEMPTS) >= 200, timeout_seconds=30, message="the drain is under way")
    stop_at = time.monotonic() + KILL_FOR_SECONDS
    while time.monotonic() < stop_at:
        time.sleep(rng.uniform(*KILL_EVERY_SECONDS))
        candidates = children(worker, redis, killed)
        if not candidates or redis.llen("queue:default") == 0:
            break
        pid, identity = rng.choice(candidates)
        inflight_key = f"jobsapp:inflight:{identity}"
        in_flight_at_kill.append(redis.llen(inflight_key))
        os.kill(pid, signal.SIGKILL)
        killed.add(pid)
        killed_at = time.monotonic()
        if reliable:
            wait_until(lambda key=inflight_key: redis.llen(key) == 0, timeout_seconds=90, message="the victim's jobs are back")
            recoveries.append(time.monotonic() - killed_at)
    return {
        "kills": len(killed),
        "in_flight_at_kill_max": max(in_flight_at_kill, default=0),
        "recovery_seconds_max": max(recoveries, default=0.0),
    }


def test_sigkill_a_random_worker_repeatedly_loses_nothing(redis_server, redis, ledger, start_worker, measure):
    # Given thousands of ledger jobs
    ids = [f"s1-{index}" for index in range(JOBS)]
    LedgerJob.perform_bulk([[ledger_id, SLEEP_MS] for ledger_id in ids])
    # When three supervised processes drain them and one is SIGKILLed every few seconds
    started = time.monotonic()
    worker = start_worker(["-P", "3", "-c", "10", "-t", "5"], overrides=FAST_LIVENESS)
    kills = drain_with_kills(worker, redis, ledger, rng=random.Random(1), reliable=True)
    wait_until(lambda: ledger.hlen(DONE) == JOBS, timeout_seconds=120, message="every job finished")
    elapsed = time.monotonic() - started
    worker.stop()
    # Then every job ran, is done and nowhere else; duplicates are few
    report = check(redis, ledger, ids)
    measure(
        "1 SIGKILL x3 reliable",
        jobs=JOBS,
        lost=len(report.lost),
        duplicates=report.duplicates,
        **kills,
        drain_seconds=elapsed,
    )
    assert kills["kills"] >= 2, "the drain ended before two kills; use more jobs"
    report.assert_clean()
    # at most what the victims held in flight (running + prefetched) ran twice
    assert report.duplicates <= kills["kills"] * (10 + 20)
    assert kills["recovery_seconds_max"] < 10  # restart in the same slot recovers at once
    assert not [key for key in redis.scan_iter(match="jobsapp:inflight:*") if redis.llen(key)]


def test_sigkill_with_basic_fetch_loses_the_running_jobs(redis_server, redis, ledger, start_worker, measure):
    # Given the same drain with Sidekiq's BRPOP fetch (no in-flight list)
    ids = [f"s1b-{index}" for index in range(JOBS)]
    LedgerJob.perform_bulk([[ledger_id, SLEEP_MS] for ledger_id in ids])
    worker = start_worker(["-P", "3", "-c", "10", "-t", "5", "--fetch", "basic"], overrides=FAST_LIVENESS)
    kills = drain_with_kills(worker, redis, ledger, rng=random.Random(2), reliable=False)
    wait_until(lambda: redis.llen("queue:default") == 0, timeout_seconds=120, message="the queue is drained")
    time.sleep(SLEEP_MS / 1000 * 4)
    worker.stop()
    # Then the checker sees the jobs that were running in the killed processes: lost
    report = check(redis, ledger, ids)
    measure("1 SIGKILL x3 basic fetch", jobs=JOBS, lost=len(report.lost), duplicates=report.duplicates, kills=kills["kills"])
    assert kills["kills"] >= 2
    assert report.lost, f"basic fetch lost nothing after {kills['kills']} kills; the checker could not tell"
    with pytest.raises(AssertionError, match="lost"):
        report.assert_clean()


def test_orphans_of_killed_unsupervised_workers_come_back_through_the_sweeper(redis_server, redis, ledger, start_worker, measure):
    # Given three independent processes (not supervised, so nobody restarts a dead one)
    ids = [f"s1s-{index}" for index in range(600)]
    LedgerJob.perform_bulk([[ledger_id, 200] for ledger_id in ids])
    workers = [start_worker(["-c", "10", "-t", "5"], overrides=FAST_LIVENESS) for _ in range(3)]
    wait_until(lambda: ledger.hlen(ATTEMPTS) >= 60, timeout_seconds=30, message="the drain is under way")
    # When two of them are SIGKILLed and stay dead
    victims = workers[:2]
    held = 0
    for victim in victims:
        held += redis.llen(f"jobsapp:inflight:{victim.identity}")
        victim.kill()
    killed_at = time.monotonic()
    wait_until(
        lambda: all(redis.llen(f"jobsapp:inflight:{victim.identity}") == 0 for victim in victims),
        timeout_seconds=90,
        message="the survivor swept the orphans back",
    )
    recovery_seconds = time.monotonic() - killed_at
    wait_until(lambda: ledger.hlen(DONE) == len(ids), timeout_seconds=120, message="every job finished")
    workers[2].stop()
    # Then nothing was lost, and the orphans came back once the victims' heartbeats expired
    report = check(redis, ledger, ids)
    measure(
        "1 sweeper (TTL 3 s)",
        jobs=len(ids),
        orphans=held,
        lost=len(report.lost),
        duplicates=report.duplicates,
        recovery_seconds=recovery_seconds,
    )
    report.assert_clean()
    assert held > 0
    ttl = FAST_LIVENESS["PROCESS_TTL_SECONDS"]
    # heartbeat TTL + the survivor's next turn + a beat: the fleet takes turns to sweep, and the
    # victims keep theirs until their schedulers' entries go stale (seconds here, after a 3 s TTL;
    # long before the production 60 s one), so the survivor's turn comes every three intervals
    assert recovery_seconds < ttl + len(workers) * FAST_LIVENESS["ORPHAN_SWEEP_INTERVAL_SECONDS"] + 3


@pytest.mark.skipif(not SOAK, reason="soak only (JOBSAPP_SOAK=1): waits out the production 60 s heartbeat TTL")
def test_orphans_come_back_within_90_seconds_with_production_intervals(redis_server, redis, ledger, start_worker, measure):
    # Given two processes with the production heartbeat (5 s), TTL (60 s) and sweep (15 s)
    ids = [f"s1p-{index}" for index in range(200)]
    LedgerJob.perform_bulk([[ledger_id, 2000] for ledger_id in ids])
    victim, survivor = (start_worker(["-c", "10", "-t", "5"]) for _ in range(2))
    wait_until(lambda: redis.llen(f"jobsapp:inflight:{victim.identity}") > 0, timeout_seconds=30)
    # When one is SIGKILLed and nobody restarts it
    victim.kill()
    killed_at = time.monotonic()
    wait_until(lambda: redis.llen(f"jobsapp:inflight:{victim.identity}") == 0, timeout_seconds=120, interval_seconds=0.5)
    recovery_seconds = time.monotonic() - killed_at
    wait_until(lambda: ledger.hlen(DONE) == len(ids), timeout_seconds=180, message="every job finished")
    survivor.stop()
    report = check(redis, ledger, ids)
    measure("1 sweeper (production intervals)", lost=len(report.lost), duplicates=report.duplicates, recovery_seconds=recovery_seconds)
    report.assert_clean()
    assert recovery_seconds < 90


def test_an_in_flight_list_missing_from_the_index_is_still_swept(redis_server, redis, ledger, start_worker):
    # Given a dead process's in-flight list that never made it into jobsapp:inflight (the index
    # was flushed after its last heartbeat, then it fetched and died)
    LedgerJob.perform_async("s1-unindexed", 0)
    redis.lmove("queue:default", "jobsapp:inflight:ghost:1:0123456789ab", "RIGHT", "LEFT")
    assert not redis.exists("jobsapp:inflight")
    # When a live worker's sweeper runs, Then the job comes back and runs
    worker = start_worker(["-c", "2"], overrides=FAST_LIVENESS)
    wait_until(lambda: ledger.hget(DONE, "s1-unindexed"), timeout_seconds=15, message="the unindexed orphan ran")
    worker.stop()
    assert not redis.exists("jobsapp:inflight:ghost:1:0123456789ab")
