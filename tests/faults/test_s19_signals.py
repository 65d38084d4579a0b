"""Scenario 19: signals a supervisor must survive, and children that must follow their parent.

Real ``runworkers`` processes, real signals:

- (a) HUP, USR1, USR2 or PIPE sent to a ``-P 2`` parent: the parent and its two children stay
  up, the children keep their parent (no orphan runs a job), jobs pushed afterwards run, and a
  TERM to the parent still stops the whole family with exit 0;
- (b) the ``-P 2`` parent SIGKILLed while its children run jobs: the children stop as on TERM
  (their running jobs finish within ``-t``), take no job pushed after the kill, and nothing is lost;
- (c) TSTP to the ``-P 2`` parent, then a child crashes: the child restarted in its slot is quiet
  from its first beat and takes none of the jobs pushed afterwards;
- (d) ``-P 1`` sent USR1 while it runs jobs: it logs the signal, stays up and finishes them.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import ATTEMPTS, DONE, LedgerJob
from tests.faults.ledger import check
from tests.workers import wait_until

pytestmark = pytest.mark.slow


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has: it waits to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def child_pids(worker) -> list[int]:
    """The pids of the children a ``-P`` worker registered at start."""
    return [json.loads(worker.redis.hget(identity, "info"))["pid"] for identity in worker.identities]


def live_identities(worker) -> dict[str, dict]:
    """identity -> its process hash, for every process listed in Redis with a live heartbeat."""
    found = {}
    for identity in worker.redis.smembers("processes"):
        process = worker.redis.hgetall(identity)
        if process.get("info"):
            found[identity] = process
    return found


@pytest.mark.parametrize("signal_number", [signal.SIGUSR1, signal.SIGHUP, signal.SIGUSR2, signal.SIGPIPE], ids=lambda s: s.name)
def test_a_signal_the_supervisor_does_not_use_changes_nothing(redis, ledger, start_worker, measure, signal_number):
    # Given a -P 2 parent and its two children
    worker = start_worker(["-P", "2", "-c", "2", "-t", "5"], overrides=FAST_LIVENESS)
    children = child_pids(worker)
    # When a signal it does not use reaches the parent
    worker.signal(signal_number)
    time.sleep(1.0)
    # Then the parent is still up and both children still have it as their parent
    assert worker.process.poll() is None, worker.output[-3000:]
    assert all(running(pid) and parent_of(pid) == worker.pid for pid in children)
    # And jobs pushed now run, taken by those children only
    ids = [f"s19a-{signal_number.name}-{index}" for index in range(10)]
    LedgerJob.perform_bulk([[ledger_id, 0] for ledger_id in ids])
    wait_until(lambda: ledger.hlen(DONE) == 10, timeout_seconds=20, message="the ten jobs ran")
    orphans = [pid for pid in children if running(pid) and parent_of(pid) != worker.pid]
    # And a TERM to the parent (a deploy's kill -TERM $(cat pidfile)) still stops the whole family
    assert worker.stop() == 0
    assert not any(running(pid) for pid in children)
    if signal_number != signal.SIGPIPE:  # PIPE is ignored without a word (a closed socket raises it too)
        assert f"{signal_number.name} ignored" in worker.output
    measure(f"19a {signal_number.name} to a -P 2 parent", parent_alive=1, orphans=len(orphans), jobs_run=ledger.hlen(DONE))


def test_children_stop_gracefully_when_their_parent_is_killed(redis, ledger, start_worker, measure):
    # Given a -P 2 parent whose children run four 2-second jobs
    worker = start_worker(["-P", "2", "-c", "2", "-t", "10"], overrides=FAST_LIVENESS)
    children = child_pids(worker)
    running_ids = [f"s19b-running-{index}" for index in range(4)]
    LedgerJob.perform_bulk([[ledger_id, 2_000] for ledger_id in running_ids])
    wait_until(lambda: ledger.hlen(ATTEMPTS) == 4, timeout_seconds=15, message="the four jobs started")
    # When the parent is SIGKILLed
    worker.signal(signal.SIGKILL)
    killed = time.monotonic()
    # Then both children stop on their own, after finishing their running jobs
    wait_until(lambda: not any(running(pid) for pid in children), timeout_seconds=20, message="the children stopped")
    stopped_seconds = time.monotonic() - killed
    assert "supervisor (pid" in worker.output and "is gone: stopping as on TERM" in worker.output
    # And no job pushed after the kill was taken by an orphan
    late_ids = [f"s19b-late-{index}" for index in range(10)]
    LedgerJob.perform_bulk([[ledger_id, 0] for ledger_id in late_ids])
    time.sleep(1.0)
    orphan_runs = sum(1 for ledger_id in late_ids if ledger.hget(ATTEMPTS, ledger_id))
    assert orphan_runs == 0
    # And nothing is lost: the running jobs finished once, the late ones wait in their queue
    report = check(redis, ledger, [*running_ids, *late_ids])
    report.assert_clean(allowed_places=("done", "queue"), must_run=False)
    assert all(report.places[ledger_id] == ["done"] for ledger_id in running_ids), report.summary()
    assert all(report.places[ledger_id] == ["queue"] for ledger_id in late_ids), report.summary()
    assert report.duplicates == 0
    measure("19b -P 2 parent SIGKILLed", children_stopped_seconds=round(stopped_seconds, 1), orphan_runs=orphan_runs, lost=len(report.lost))


def test_a_child_restarted_after_quiet_stays_quiet(redis, ledger, start_worker, measure):
    # Given a -P 2 parent told to quiet (TSTP, the first step of a deploy), both children quiet
    worker = start_worker(["-P", "2", "-c", "2", "-t", "5"], overrides=FAST_LIVENESS)
    children = child_pids(worker)
    worker.signal(signal.SIGTSTP)
    wait_until(
        lambda: all(process.get("quiet") == "true" for process in live_identities(worker).values()),
        timeout_seconds=10,
        message="both children are quiet",
    )
    before = set(live_identities(worker))
    # When one child crashes and is restarted in its slot
    os.kill(children[0], signal.SIGKILL)
    wait_until(lambda: set(live_identities(worker)) - before, timeout_seconds=20, message="the restarted child registered")
    (restarted,) = set(live_identities(worker)) - before
    # Then it is quiet from its first beat
    assert worker.redis.hget(restarted, "quiet") == "true"
    # And it takes none of the jobs pushed now
    ids = [f"s19c-{index}" for index in range(20)]
    LedgerJob.perform_bulk([[ledger_id, 0] for ledger_id in ids])
    time.sleep(2.0)
    ran = ledger.hlen(ATTEMPTS)
    assert ran == 0
    assert redis.llen("queue:default") == 20
    # And a TERM still stops the family
    assert worker.stop() == 0
    measure("19c TSTP then a child crash", restarted_quiet=1, jobs_run_while_quiet=ran)


def test_a_single_process_ignores_usr1_and_finishes_its_jobs(redis, ledger, start_worker, measure):
    # Given -P 1 running two 1.5-second jobs
    worker = start_worker(["-P", "1", "-c", "2", "-t", "5"], overrides=FAST_LIVENESS)
    ids = ["s19d-0", "s19d-1"]
    LedgerJob.perform_bulk([[ledger_id, 1_500] for ledger_id in ids])
    wait_until(lambda: ledger.hlen(ATTEMPTS) == 2, timeout_seconds=15, message="the two jobs started")
    # When it gets USR1
    worker.signal(signal.SIGUSR1)
    # Then it logs it, stays up and finishes both jobs, once
    wait_until(lambda: ledger.hlen(DONE) == 2, timeout_seconds=15, message="the two jobs finished")
    assert worker.process.poll() is None, worker.output[-3000:]
    assert "USR1 ignored" in worker.output
    assert worker.stop() == 0
    report = check(redis, ledger, ids)
    report.assert_clean()
    assert report.duplicates == 0
    measure("19d USR1 to -P 1", process_alive=1, jobs_finished=2)
