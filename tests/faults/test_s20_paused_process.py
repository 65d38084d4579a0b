"""Scenario 20: a worker declared dead while it lives (paused past its heartbeat TTL, or its
in-flight list recovered by another process) fences itself.

The red-team case scaled down: SIGSTOP for 75 s past a 60 s heartbeat becomes a pause of
``PAUSE_SECONDS`` past a 3 s TTL (``FAST_LIVENESS``). Given worker A (``-P 1``, or ``-P 2``
paused as a family) running two jobs that work in 50 ms steps inside
``concurrent("s20-pair", 2)``, When A is SIGSTOPped, worker B starts, B's sweeper recovers A's
jobs (releasing A's two slots) and B runs them and a fresh job in the freed slots, and A is
then resumed (SIGCONT), Then A fences itself: its old runs do no more work, nothing it held is
released by it, it restarts as a new identity (``-P 1``: same pid; ``-P 2``: its supervisor
starts new children) and the runs holding slots never exceed 2. Jobs run twice only as
at-least-once requires: the two A was running when it was declared dead started again in B,
and each finished once.

Holders are measured from the jobs' own steps (``ledger:ticks``): a run holds a slot from its
first step to its last. A's old runs are counted apart: the steps they take after the resume
are work done without a slot. Each may take the one step it wakes into: SIGCONT wakes every
thread of A at once, and a job thread that gets the interpreter before the heartbeat thread
runs that step (a millisecond) before A fences itself; no step after that. Without fencing
they take every step they have left (scenario 20's "guards against").

Two more cases: a quiet ``-P 1`` fenced after a pause comes back quiet; a live worker whose
in-flight list another process recovers fences itself at its next beat.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from jobsapp import keys
from jobsapp.connection import get_redis
from jobsapp.worker.recovery import recover_list
from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import ATTEMPTS, DONE, LedgerJob
from tests.faults.ledger import check
from tests.faults.limiter_jobs import TICKS, PairLedgerJob
from tests.workers import wait_until

pytestmark = pytest.mark.slow

#: How long A stays stopped: past its 3 s TTL plus a sweep, with time for B to take the jobs.
PAUSE_SECONDS = 7.0
#: Steps of 50 ms: A's jobs have work left when it resumes (about 90 steps).
STEPS = 100
#: The most steps an old run of A may take after the resume: the one its thread wakes into, plus
#: what a machine loaded by other tests lets it take before the heartbeat thread gets to run.
MOST_STEPS_AFTER_RESUME = 5


def jobs_started_once_fenced(output: str) -> list[str]:
    """The job start lines a worker's processes logged between being declared dead and their
    exit or restart (a -P 1 process restarts under the same pid: its new image's lines are not
    counted)."""
    lines = output.splitlines()
    started = []
    for index, line in enumerate(lines):
        if "was declared dead (" not in line or " pid=" not in line:
            continue
        pid = line.split(" pid=", 1)[1].split(" ", 1)[0]
        for later in lines[index + 1 :]:
            if f" pid={pid} " not in later:
                continue
            if "restarting this worker process" in later or " started: " in later:
                break
            if later.endswith(" start"):
                started.append(later)
    return started


def most_holders_at_once(ticks: list[list]) -> int:
    """The most runs (ledger id, attempt) whose first-to-last step spans overlap at one moment (a
    run of one step holds at that moment)."""
    spans: dict[tuple[str, int], list[float]] = {}
    for ledger_id, attempt, _pid, moment in ticks:
        span = spans.setdefault((ledger_id, attempt), [moment, moment])
        span[0], span[1] = min(span[0], moment), max(span[1], moment)
    events = sorted(
        [(start, 1) for start, _ in spans.values()] + [(end, -1) for _, end in spans.values()], key=lambda event: (event[0], -event[1])
    )
    holders = most = 0
    for _moment, change in events:
        holders += change
        most = max(most, holders)
    return most


@pytest.mark.parametrize("processes", ["1", "2"], ids=["-P 1", "-P 2"])
def test_a_process_paused_past_its_ttl_fences_itself_and_the_limit_holds(redis, ledger, start_worker, measure, processes):
    # Given worker A running two jobs, each holding one of the limiter's two slots (-P 1: two
    # threads of one process, restarted in place once fenced; -P 2: one job in each child,
    # restarted by their supervisor)
    threads = "2" if processes == "1" else "1"
    paused = start_worker(["-P", processes, "-c", threads, "-t", "5"], overrides=FAST_LIVENESS)
    first_identities = set(paused.identities)
    old_pids = {paused.info(identity)["pid"] for identity in first_identities}
    PairLedgerJob.perform_async("s20-a", STEPS)
    PairLedgerJob.perform_async("s20-b", STEPS)
    wait_until(lambda: ledger.llen(TICKS) >= 10 and ledger.hlen(ATTEMPTS) == 2, timeout_seconds=15, message="A's two jobs work")

    def signal_a(signal_number: int) -> None:
        if processes == "1":
            os.kill(paused.pid, signal_number)
        else:  # the parent and its children alike
            os.killpg(paused.pid, signal_number)

    # When A is paused past its heartbeat TTL
    signal_a(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        # and worker B starts (two processes of one thread), with a fresh job waiting for a slot
        other = start_worker(["-P", "2", "-c", "1", "-t", "5"], overrides=FAST_LIVENESS)
        PairLedgerJob.perform_async("s20-fresh", STEPS // 2)
        # and B's sweeper recovers A's jobs, whose slots go to B's runs
        wait_until(lambda: int(ledger.hget(ATTEMPTS, "s20-a") or 0) + int(ledger.hget(ATTEMPTS, "s20-b") or 0) >= 3,
                   timeout_seconds=PAUSE_SECONDS + 10, message="B took A's jobs over")  # fmt: skip
        time.sleep(max(0.0, PAUSE_SECONDS - (time.monotonic() - stopped_at)))
    finally:
        resumed_at = time.time()  # (read before the signal: no step of A's can come before it)
        signal_a(signal.SIGCONT)  # And A is resumed
    # Then every job finishes
    ids = ["s20-a", "s20-b", "s20-fresh"]
    wait_until(lambda: all(ledger.hget(DONE, ledger_id) for ledger_id in ids), timeout_seconds=60, message="every job finished")
    time.sleep(1.0)  # long enough for A's old runs to show any step they still took
    ticks = [json.loads(raw) for raw in ledger.lrange(TICKS, 0, -1)]
    old_runs = [tick for tick in ticks if tick[2] in old_pids and tick[1] == 1]
    stale = [tick for tick in old_runs if tick[3] > resumed_at]
    legitimate = [tick for tick in ticks if tick not in stale]
    holders = most_holders_at_once(legitimate)
    # A's old runs after the resume as runs of their own (attempt 0), each working from the first
    # of those steps to the last (they happen together, right at the resume): how many worked at once
    window = (min(tick[3] for tick in stale), max(tick[3] for tick in stale)) if stale else ()
    working = most_holders_at_once(legitimate + [[ledger_id, 0, pid, moment] for ledger_id, _attempt, pid, _ in stale for moment in window])
    report = check(redis, ledger, ids)
    attempts = {ledger_id: int(ledger.hget(ATTEMPTS, ledger_id)) for ledger_id in ids}
    measure(
        f"20 process paused past its TTL, -P {processes}",
        pause_seconds=PAUSE_SECONDS,
        over_admission=max(0, holders - 2),
        old_runs_steps_after_resume=len(stale),
        old_runs_seconds_after_resume=round(max((tick[3] for tick in stale), default=resumed_at) - resumed_at, 3),
        most_working_at_once=working,
        ran_twice=sum(1 for count in attempts.values() if count > 1),
        finished_twice=report.duplicates,
        lost=len(report.lost),
    )
    # And the limit of 2 held for every run that had a slot, and A's old runs stopped at once:
    # the step each was woken into (on a loaded machine a few more) of the ~90 they had left
    assert holders <= 2
    assert all(sum(1 for tick in stale if tick[0] == ledger_id) <= MOST_STEPS_AFTER_RESUME for ledger_id in ("s20-a", "s20-b")), (
        f"A's old runs took {len(stale)} steps after it resumed at {resumed_at:.3f}\n{paused.output[-2500:]}"
    )
    # And A fenced itself and came back as new identities (-P 1: under the same pid; -P 2: new children)
    wait_until(lambda: "was declared dead" in paused.output, timeout_seconds=10, message="A logged that it was declared dead")
    # And once fenced, no thread of A started another job (the one that takes it is A's slot successor)
    assert jobs_started_once_fenced(paused.output) == [], paused.output[-4000:]

    def registered_again() -> int:
        identities = paused.redis.smembers("processes") - first_identities - set(other.identities)
        pids = {paused.info(identity).get("pid") for identity in identities}
        return len(pids & {paused.pid}) if processes == "1" else len(pids - old_pids - {None})

    try:
        wait_until(lambda: registered_again() == int(processes), timeout_seconds=20, message="A registered again as new identities")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{paused.output[-4000:]}") from None
    assert paused.process.poll() is None
    # And jobs ran twice only as at-least-once requires: A's two, started again by B, each finished once
    report.assert_clean()
    assert report.duplicates == 0
    assert attempts == {"s20-a": 2, "s20-b": 2, "s20-fresh": 1}
    # And no slot is left held
    assert redis.zcard(keys.limiter_holders("s20-pair")) == 0
    assert all(redis.llen(keys.inflight(identity)) == 0 for identity in first_identities)


def test_a_quiet_single_process_fenced_after_a_pause_comes_back_quiet(redis, ledger, start_worker, measure):
    # Given a -P 1 worker told to quiet (TSTP)
    paused = start_worker(["-P", "1", "-c", "2", "-t", "5"], overrides=FAST_LIVENESS)
    first_identity = paused.identity
    paused.signal(signal.SIGTSTP)
    wait_until(lambda: paused.redis.hget(first_identity, "quiet") == "true", timeout_seconds=10, message="it is quiet")
    # When it is paused past its heartbeat TTL, with no other worker around, and resumed
    paused.signal(signal.SIGSTOP)
    time.sleep(4.5)
    paused.signal(signal.SIGCONT)

    # Then it fences itself and restarts in place under a new identity, quiet from its first beat
    def restarted() -> str:
        identities = paused.redis.smembers("processes") - {first_identity}
        return next((identity for identity in identities if paused.info(identity).get("pid") == paused.pid), "")

    identity = wait_until(restarted, timeout_seconds=20, message="it registered again as a new identity")
    assert "was declared dead" in paused.output
    assert paused.redis.hget(identity, "quiet") == "true"
    # And it takes none of the jobs pushed now
    LedgerJob.perform_bulk([[f"s20q-{index}", 0] for index in range(5)])
    time.sleep(1.5)
    assert ledger.hlen(ATTEMPTS) == 0 and redis.llen("queue:default") == 5
    assert paused.stop() == 0
    measure("20 quiet -P 1 fenced after a pause", restarted_quiet=1, jobs_run_while_quiet=0)


def test_a_process_whose_in_flight_list_was_recovered_while_it_ran_fences_itself(redis, ledger, start_worker, measure):
    # Given a -P 1 worker of one thread running a 3 s job (it fetches nothing more meanwhile)
    worker = start_worker(["-P", "1", "-c", "1", "-t", "5"], overrides=FAST_LIVENESS)
    first_identity = worker.identity
    LedgerJob.perform_async("s20-taken", 3_000)
    wait_until(lambda: ledger.hget(ATTEMPTS, "s20-taken") == b"1", timeout_seconds=15, message="the job started")
    # When another process recovers its in-flight list while it is alive (a sweeper that judged
    # it dead: a network partition past its TTL, say), putting the job back on its queue
    assert recover_list(get_redis(), first_identity) == (1, 0)
    recovered_at = time.monotonic()
    # Then it notices at its next beat, stops the job, and restarts as a new identity
    wait_until(lambda: "its in-flight list was recovered by another process" in worker.output, timeout_seconds=10, message="it fenced")
    fenced_seconds = time.monotonic() - recovered_at
    # And the job, back on its queue, runs again and finishes once
    wait_until(lambda: ledger.hget(DONE, "s20-taken") == b"1", timeout_seconds=20, message="the job finished")
    time.sleep(3.5)  # the first run would have finished by now had it not been stopped
    assert int(ledger.hget(DONE, "s20-taken")) == 1 and int(ledger.hget(ATTEMPTS, "s20-taken")) == 2
    assert worker.identity != first_identity or any(
        identity != first_identity and worker.info(identity).get("pid") == worker.pid for identity in worker.redis.smembers("processes")
    )
    report = check(redis, ledger, ["s20-taken"])
    report.assert_clean()
    assert worker.stop() == 0
    measure("20 in-flight list recovered from a live process", fenced_seconds=round(fenced_seconds, 1), finished_twice=report.duplicates)
