"""A Celery chord's callback is never lost: neither by a callback too big to push, nor by a process
that dies between recording the last header part and pushing the callback, nor by Redis freezing
there, nor by workers SIGKILLed while chords run.

Given three header tasks and a callback, When the callback's arguments exceed MAX_PAYLOAD_BYTES,
Then the callback's result says FAILURE with the reason (never PENDING forever) and the header
tasks stay SUCCESS. When the worker dies (``os._exit``) just after the last part is recorded,
and a new worker takes its place, Then the callback runs exactly once with every value.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time

import pytest

from jobsapp import connection, faults
from jobsapp.celery import chord
from jobsapp.errors import PayloadTooLarge
from tests.faults.conftest import FAST_LIVENESS
from tests.faults.tasks import CALLBACK_RUNS, chord_part, chord_part_freezing_redis, chord_part_slow, chord_sizes, chord_total
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


def test_chords_drained_while_workers_are_sigkilled_lose_no_callback(redis, ledger, start_worker, measure):
    # Given 60 chords of 5 parts of 100 ms, and two supervised processes of 5 threads
    chords = 60
    results = [
        chord([chord_part_slow.s(part, 100) for part in range(5)], chord_total.s(f"k{index}")).apply_async() for index in range(chords)
    ]
    worker = start_worker(["-P", "2", "-c", "5"], overrides=FAST_LIVENESS)
    # When a random child is SIGKILLed three times while they run (its supervisor restarts it)
    rng = random.Random(7)
    killed: set[int] = set()
    wait_until(lambda: ledger.hlen(CALLBACK_RUNS) >= 3, timeout_seconds=30, message="callbacks are running")
    for _ in range(3):
        time.sleep(rng.uniform(0.3, 0.8))
        candidates = [pid for pid in _children(worker, redis) if pid not in killed]
        if candidates:
            victim = rng.choice(candidates)
            os.kill(victim, signal.SIGKILL)
            killed.add(victim)
    # Then every callback runs (at least once: a job killed after it ran runs again) with every value
    values = [result.get(timeout=90, interval=0.2) for result in results]
    worker.stop()
    assert values == [10] * chords
    runs = [int(ledger.hget(CALLBACK_RUNS, f"k{index}") or 0) for index in range(chords)]
    assert min(runs) >= 1
    assert redis.zcard("dead") == 0
    measure(
        "chords under SIGKILL", chords=chords, kills=len(killed), callbacks_lost=0, callbacks_run_twice=sum(1 for run in runs if run > 1)
    )


def _children(worker, redis) -> list[int]:
    pids = []
    for identity in redis.smembers("processes"):
        raw = redis.hget(identity, "info")
        pid = json.loads(raw)["pid"] if raw else None
        if pid and pid != worker.pid:
            pids.append(pid)
    return pids
