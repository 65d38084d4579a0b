"""Hard limits of runworkers (issue 9, section 5): absurd -c/-P are refused with a clear message,
and TERM/INT stop a process at any point of its start-up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from django.core.management import CommandError, call_command

from jobsapp.worker.launcher import MAX_CONCURRENCY, default_processes, max_processes
from tests.workers import ROOT_DIR


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-c", "1000000"], f"at most {MAX_CONCURRENCY}"),
        (["-c", str(MAX_CONCURRENCY + 1)], "more threads than a process can use"),
        (["-P", "100000"], "more processes than this machine can run usefully"),
    ],
)
def test_absurd_concurrency_or_processes_are_refused_with_the_limit(flags, message):
    # When runworkers is given an absurd thread or process count, Then it refuses before starting
    with pytest.raises(CommandError, match=message):
        call_command("runworkers", *flags)


def test_the_default_process_count_comes_from_the_machine():
    # Given no -P, Then there is one process per CPU this process may run on, within the limit
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert default_processes() == expected
    assert default_processes() <= max_processes()


@pytest.mark.slow
@pytest.mark.parametrize("args", [["-c", "2"], ["-P", "2", "-c", "2"]])
def test_term_stops_a_process_at_any_point_of_its_start_up(redis_server, redis, args):
    env = {**os.environ, "REDIS_URL": redis_server.url, "PYTHONUNBUFFERED": "1"}
    for delay_seconds in (0.0, 0.4, 0.8, 1.2, 1.6, 2.5):
        redis.flushall()
        # Given runworkers starting up
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runworkers", *args, "-t", "2"],
            cwd=ROOT_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            # When TERM arrives at this point of its start-up
            time.sleep(delay_seconds)
            process.send_signal(signal.SIGTERM)
            # Then it exits promptly, and no process of it stays registered
            code = process.wait(timeout=15)
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert code in (0, -signal.SIGTERM), f"exit code {code} after TERM at {delay_seconds} s"
        assert redis.scard("processes") == 0, f"a process stayed registered after TERM at {delay_seconds} s"
