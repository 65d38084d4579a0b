"""A Celery chord's callback is never lost: neither by a callback too big to push, nor by a process
that dies between recording the last header part and pushing the callback.

Given three header tasks and a callback, When the callback's arguments exceed MAX_PAYLOAD_BYTES,
Then the callback's result says FAILURE with the reason (never PENDING forever) and the header
tasks stay SUCCESS. When the worker dies (``os._exit``) just after the last part is recorded,
and a new worker takes its place, Then the callback runs exactly once with every value.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from jobsapp import connection, faults
from jobsapp.celery import chord
from jobsapp.errors import PayloadTooLarge
from tests.faults.conftest import FAST_LIVENESS
from tests.faults.tasks import CALLBACK_RUNS, chord_part, chord_part_freezing_redis, chord_sizes
from tests.redis_server import RedisServer
from tests.workers import wait_until

pytestmark = pytest.mark.slow

#: Seconds a callback may take to be ready before the scenario fails (it never hangs).
READY_SECONDS = 30


def test_a_callback_too_big_to_push_fails_visibly_and_the_header_stays_successful(redis, ledger, start_worker, measure):
    # Given a chord whose three parts return ~400 KB each (1.2 MB together, over the 1 MB limit)
    size = 400_000
    result = chord([chord_part.s(index, size) for index in range(3)], chord_sizes.s("too-big")).apply_async()
    header = result.parent
    # When a worker runs it
    worker = start_worker(["-c", "3"], overrides=FAST_LIVENESS)
    started = time.monotonic()
    wait_until(lambda: result.ready(), timeout_seconds=READY_SECONDS, message="the callback's result is ready")
    worker.stop()
    # Then the callback failed with the reason, and never ran
    assert result.state == "FAILURE"
    with pytest.raises(PayloadTooLarge, match="MAX_PAYLOAD_BYTES"):
        result.get(timeout=1)
    assert ledger.hget(CALLBACK_RUNS, "too-big") is None
    # And every header task stays SUCCESS, nothing is in the dead set
    assert [each.state for each in header.results] == ["SUCCESS"] * 3
    assert redis.zcard("dead") == 0
    measure("chord oversized callback", parts=3, part_bytes=size, seconds_to_failure=time.monotonic() - started)


def test_a_worker_dying_after_the_last_part_cannot_lose_the_callback(redis, ledger, start_worker, measure):
    # Given a worker that dies (os._exit) just after it records the third and last part
    armed = start_worker(
        ["-c", "1", "-t", "2"],
        overrides=FAST_LIVENESS,
        env={"JOBSAPP_FAULT_POINT": "chord_part_recorded", "JOBSAPP_FAULT_AFTER": "3"},
    )
    result = chord([chord_part.s(index, 10) for index in range(3)], chord_sizes.s("killed")).apply_async()
    assert armed.process is not None
    wait_until(lambda: armed.process.poll() is not None, timeout_seconds=30, message="the worker died at the last part")
    assert armed.process.returncode == faults.EXIT_CODE, armed.output[-2000:]
    # When a new worker takes its place (and recovers the dead one's job)
    died_at = time.monotonic()
    replacement = start_worker(["-c", "2"], overrides=FAST_LIVENESS)
    # Then the callback runs, once, with every part's value
    assert result.get(timeout=READY_SECONDS, interval=0.1) == [10, 10, 10]
    seconds = time.monotonic() - died_at
    wait_until(lambda: redis.llen(f"jobsapp:inflight:{armed.identity}") == 0, timeout_seconds=30, message="recovered")
    time.sleep(1)  # a second push of the callback, if any, would have run by now
    replacement.stop()
    assert int(ledger.hget(CALLBACK_RUNS, "killed")) == 1
    measure("chord os._exit after the last part", callback_runs=1, seconds_to_callback=seconds)


def test_a_redis_freeze_while_the_last_part_is_recorded_retries_the_follow_up_not_the_task(
    redis_server, ledger, start_worker, measure, settings
):
    server = RedisServer().start()
    try:
        redis = server.client()
        settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": server.url}
        connection.reset()
        # Given a chord whose last header task freezes Redis as it returns, run by a worker with
        # a 1 s socket timeout (so recording the part times out; Redis runs the script on waking)
        worker = start_worker(["-c", "1"], overrides={**FAST_LIVENESS, "REDIS_SOCKET_TIMEOUT_SECONDS": 1.0}, redis_url=server.url)
        header = [chord_part.s(0, 1), chord_part.s(1, 1), chord_part_freezing_redis.s(2, server.process.pid)]
        result = chord(header, chord_sizes.s("frozen")).apply_async()
        # When Redis freezes there for 3 s
        wait_until(lambda: _stopped(server.process.pid), timeout_seconds=30, message="the last part froze Redis")
        time.sleep(3)
        os.kill(server.process.pid, signal.SIGCONT)
        # Then the callback runs once with every value, and the header task is SUCCESS (its
        # function ran once: the follow-up was retried, not the task), nothing is dead
        assert result.get(timeout=READY_SECONDS, interval=0.1) == [1, 1, 1]
        last = result.parent.results[-1]
        wait_until(lambda: last.state == "SUCCESS", timeout_seconds=READY_SECONDS, message="the last part is SUCCESS")
        assert last.get(timeout=1) == "2"
        time.sleep(1)  # a second push of the callback, if any, would have run by now
        worker.stop()
        assert int(ledger.hget(CALLBACK_RUNS, "frozen")) == 1
        assert redis.zcard("dead") == 0
        measure("chord Redis frozen at the last part", callback_runs=1)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.stop()
        connection.reset()


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"
