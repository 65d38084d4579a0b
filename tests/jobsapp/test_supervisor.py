"""The -P supervisor's restart policy in-process, on a manual clock (the forking itself is tested
through real processes: tests/faults/test_s01_sigkill.py and test_s02_forced_exit.py)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from jobsapp.worker.supervisor import MAX_RESTART_DELAY_SECONDS, RESTARTS_PER_MINUTE, Supervisor
from tests.manual_clock import ManualClock


def supervisor_on(clock: ManualClock) -> Supervisor:
    return Supervisor(processes=2, timeout_seconds=25, run_child=lambda slot_number, parent: 0, clock=clock)


def test_a_dead_child_is_restarted_at_once_until_its_slot_crash_loops():
    # Given a supervisor whose slot 0 child dies again and again, a second apart
    clock = ManualClock()
    supervisor = supervisor_on(clock)
    delays = []
    for _ in range(RESTARTS_PER_MINUTE + 5):
        delays.append(supervisor.restart_delay_seconds(0))
        clock.advance(1)
    # Then the first five restarts are at once, the next ones wait 2, 4, 8, 16, 30 s (capped)
    assert delays == [0.0] * RESTARTS_PER_MINUTE + [2.0, 4.0, 8.0, 16.0, MAX_RESTART_DELAY_SECONDS]
    # And another slot is not held up by it
    assert supervisor.restart_delay_seconds(1) == 0.0


def test_a_slot_that_stayed_up_a_minute_is_restarted_at_once_again():
    # Given a slot that crash-looped
    clock = ManualClock()
    supervisor = supervisor_on(clock)
    for _ in range(RESTARTS_PER_MINUTE + 1):
        supervisor.restart_delay_seconds(0)
    # When its child then runs for over a minute before dying, Then it is restarted at once
    clock.advance(61)
    assert supervisor.restart_delay_seconds(0) == 0.0


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # the child only writes to a pipe
def test_children_start_with_the_parent_s_objects_frozen_out_of_the_gc():
    # The cyclic GC writes to every object it examines: in a child those writes would copy the
    # parent's pages one by one, so every child would end up with a private copy of Django.
    reader, writer = os.pipe()

    def report(slot_number: int, parent: object) -> int:
        os.write(writer, str(gc.get_freeze_count()).encode())
        return 0

    supervisor = Supervisor(processes=1, timeout_seconds=1, run_child=report)
    try:
        supervisor._spawn(0)
        (pid,) = supervisor.children
        _, status = os.waitpid(pid, 0)
        frozen_in_child = int(os.read(reader, 100))
    finally:
        gc.unfreeze()  # this test process is no supervisor
        os.close(reader)
        os.close(writer)
    assert os.waitstatus_to_exitcode(status) == 0
    assert frozen_in_child > 10_000  # Django and the engine, imported before the fork


@pytest.mark.slow
def test_a_single_process_stopped_by_the_hard_limit_restarts_in_place_and_runs_the_next_job(redis_server, redis):
    import json

    from tests.testapp.jobs import RAN_KEY, BlockInC, Record
    from tests.workers import WorkerProcess, wait_until

    # Given -P 1 (no parent process) with a hard limit of 1 s past a job's timeout, and a job
    # stuck 60 s in one C call (JobTimeout cannot interrupt it) under a 1 s timeout
    overrides = json.dumps({"TIMEOUT_HARD_LIMIT_SECONDS": 1})
    with WorkerProcess(["-P", "1", "-c", "2"], {"JOBSAPP_TEST_OVERRIDES": overrides}, redis_url=redis_server.url) as worker:
        first_identity = worker.identity
        BlockInC.set(timeout=1).perform_async(60, "stuck")
        # When the hard limit stops the process
        wait_until(lambda: "restarting this worker process in place" in worker.output, timeout_seconds=30, message="restart")
        # Then the same pid comes back as a new worker process (a new identity in Redis)
        wait_until(
            lambda: any(
                identity.decode() != first_identity and json.loads(redis.hget(identity, "info") or "{}").get("pid") == worker.pid
                for identity in redis.smembers("processes")
            ),
            timeout_seconds=30,
            message="the process registered again under the same pid",
        )
        assert worker.process.poll() is None, "the process did not exit"
        # and the next job runs
        Record.perform_async("after the restart")
        wait_until(lambda: b"after the restart" in redis.lrange(RAN_KEY, 0, -1), timeout_seconds=30, message="the next job ran")
        # and the stuck job was filed for a retry, not lost
        assert redis.zcard("retry") == 1
    # and a TERM still stops it cleanly
    assert worker.process.returncode == 0, worker.output[-3000:]


_STOP_DURING_A_FORK = """
import os, signal, sys, time
import django
django.setup()
from jobsapp.worker import supervisor as module

real_fork = os.fork
forks = []

def fork_then_stop():
    pid = real_fork()
    forks.append(pid)
    if pid and len(forks) == 2:  # the parent, right after forking slot 1: a deploy's TERM arrives
        os.kill(os.getpid(), signal.SIGTERM)
    return pid

def run_child(slot_number, link):
    parent = os.getppid()
    while os.getppid() == parent:  # a child that only a stop signal ends (or its parent's death)
        time.sleep(0.05)
    return 1

module.os.fork = fork_then_stop
started = time.monotonic()
code = module.Supervisor(processes=2, timeout_seconds=60, run_child=run_child).run()
print(f"exit {code} after {time.monotonic() - started:.1f} s", flush=True)
"""


def test_a_stop_that_arrives_while_a_child_is_forked_reaches_that_child_too():
    # Given a supervisor of two children, and a TERM that lands just after the second fork
    # (before the parent has entered the new child in its table)
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    # When it runs, Then both children stop and the parent exits at once: it does not wait the
    # 70 s kill deadline for a child that never heard the stop
    done = subprocess.run(
        [sys.executable, "-c", _STOP_DURING_A_FORK], env=environment, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("exit 0 after "), done.stdout
    assert float(done.stdout.split()[3]) < 10
