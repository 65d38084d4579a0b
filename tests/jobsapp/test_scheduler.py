"""The scheduler's atomic move (schedule_move.lua), its timing and the fleet's shared poll cadence,
without a worker process."""

from __future__ import annotations

import itertools
import json
import threading
import time

import pytest

from jobsapp import client, keys
from jobsapp.connection import get_redis
from jobsapp.worker.scheduler import Scheduler, next_turn_seconds
from tests.testapp.jobs import Noop
from tests.workers import wait_until


def test_due_jobs_move_with_fresh_enqueued_at_and_the_rest_stay(redis):
    # Given one due scheduled job, one due retry carrying an old enqueued_at, and one future job
    past = time.time() - 5
    client.push({"class": "A", "args": [{"enqueued_at": 1}], "at": time.time() + 0.2})
    old = {"class": "B", "args": [], "queue": "retries", "jid": "b" * 24, "enqueued_at": 12.5, "retry_count": 0}
    redis.zadd("retry", {json.dumps(old, separators=(",", ":")): past})
    Noop.perform_in(3600)
    time.sleep(0.25)
    # When the scheduler runs once
    moved, wait = Scheduler(client=get_redis(), poll_interval_seconds=1).enqueue_due()
    # Then both due jobs are in their queues, stamped now, the nested key untouched
    assert moved == 2
    assert wait is None  # nothing else due before the next poll
    retried = json.loads(redis.rpop("queue:retries"))
    assert retried["enqueued_at"] > time.time() - 5 and retried["jid"] == "b" * 24
    scheduled = json.loads(redis.rpop("queue:default"))
    assert scheduled["args"] == [{"enqueued_at": 1}] and scheduled["enqueued_at"] > time.time() - 5
    assert redis.smembers("queues") >= {b"retries", b"default"}
    assert redis.zcard("schedule") == 1 and redis.zcard("retry") == 0


def test_racing_schedulers_enqueue_each_job_exactly_once(redis):
    # Given 3,000 due jobs in each set
    now = time.time() - 1
    redis.zadd("schedule", {json.dumps({"class": "S", "args": [i], "jid": f"{i:024x}", "queue": "q"}): now for i in range(3000)})
    redis.zadd("retry", {json.dumps({"class": "R", "args": [i], "jid": f"{i:024x}", "queue": "q"}): now for i in range(3000)})
    # When five schedulers race
    schedulers = [Scheduler(client=get_redis(), poll_interval_seconds=1) for _ in range(5)]
    threads = [threading.Thread(target=scheduler.enqueue_due) for scheduler in schedulers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then every job is in the queue exactly once
    jobs = [json.loads(raw) for raw in redis.lrange("queue:q", 0, -1)]
    assert len(jobs) == 6000
    assert len({(job["class"], job["args"][0]) for job in jobs}) == 6000


def test_the_scheduler_knows_when_the_next_job_within_a_poll_is_due(redis):
    # Given a job due in half a second and one due in an hour
    Noop.perform_in(0.5)
    Noop.perform_in(3600)
    # When the scheduler polls (every 2 s)
    moved, wait = Scheduler(client=get_redis(), poll_interval_seconds=2).enqueue_due()
    # Then nothing moved yet, and it knows to wake in half a second
    assert moved == 0
    assert 0.3 < wait <= 0.5


@pytest.mark.standalone_only  # counts EVALSHA calls in one server's INFO commandstats
def test_big_due_jobs_are_moved_in_calls_bounded_by_bytes(redis):
    # Given 12 due jobs of 300 KB in the schedule set, and a member that is not JSON
    now = time.time() - 1
    big = {json.dumps({"class": "Big", "args": ["x" * 300_000], "jid": f"{i:024x}", "queue": "big"}): now for i in range(12)}
    redis.zadd("schedule", {**big, b"\xff not json": now})
    calls_before = int(redis.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    # When the scheduler runs once
    moved, _ = Scheduler(client=get_redis(), poll_interval_seconds=1).enqueue_due()
    # Then every job moved, each script call carrying at most about 1 MB of jobs (two 300 KB
    # jobs, stored and pushed), and the garbage went to the default queue as it was
    calls = int(redis.info("commandstats")["cmdstat_evalsha"]["calls"]) - calls_before
    assert moved == 13 and redis.zcard("schedule") == 0
    assert redis.llen("queue:big") == 12 and calls >= 6
    assert redis.lrange("queue:default", 0, -1) == [b"\xff not json"]
    assert all(json.loads(raw)["enqueued_at"] > now for raw in redis.lrange("queue:big", 0, -1))


def test_turns_fall_at_the_rank_past_each_round_of_the_fleet():
    # One process: every interval, on the server clock's whole intervals
    assert next_turn_seconds(100.25, rank=0, fleet_size=1, interval_seconds=1.0) == pytest.approx(0.75)
    # The fourth of twenty: 3 s past each multiple of 20 s
    assert next_turn_seconds(100.25, rank=3, fleet_size=20, interval_seconds=1.0) == pytest.approx(2.75)
    assert next_turn_seconds(103.5, rank=3, fleet_size=20, interval_seconds=1.0) == pytest.approx(19.5)
    # Right at its turn (it has just polled): the next round
    assert next_turn_seconds(123.0, rank=3, fleet_size=20, interval_seconds=1.0) == pytest.approx(20.0)


def test_a_fleet_polls_in_turn_once_per_interval_in_all(redis):
    # Given twenty processes' schedulers that have each polled once (the first ones saw a smaller fleet)
    schedulers = [Scheduler(client=get_redis(), poll_interval_seconds=1.0, identity=f"host:{pid}:0123456789ab") for pid in range(20)]
    for scheduler in schedulers:
        scheduler.poll()
    # When each polls again
    turns = []
    for scheduler in schedulers:
        wait = scheduler.poll()
        turns.append(scheduler._last_server_now + wait)
    # Then each knows the fleet's size, and their next polls are one interval apart: twenty in
    # twenty seconds in all, not twenty a second
    assert {scheduler.fleet_size for scheduler in schedulers} == {20}
    ordered = sorted(turns)
    gaps = [later - earlier for earlier, later in itertools.pairwise(ordered)]
    assert all(gap == pytest.approx(1.0, abs=0.05) for gap in gaps), gaps
    assert ordered[-1] - ordered[0] < 20


def test_a_process_that_stopped_polling_loses_its_turn_and_its_entry(redis):
    # Given an entry that has not polled for long (its process was killed outright)
    now = float(redis.time()[0])
    redis.zadd(keys.SCHEDULERS, {"gone:1:0123456789ab": now - 3600})
    # When a live scheduler polls
    scheduler = Scheduler(client=get_redis(), poll_interval_seconds=1.0, identity="here:2:0123456789ab")
    wait = scheduler.poll()
    # Then the dead one is removed and the live one polls every interval, alone
    assert redis.zrange(keys.SCHEDULERS, 0, -1) == [b"here:2:0123456789ab"]
    assert scheduler.fleet_size == 1 and wait <= 1.0


def test_a_stopping_scheduler_gives_up_its_turn(redis):
    # Given a running scheduler in the fleet
    scheduler = Scheduler(client=get_redis(), poll_interval_seconds=1.0, identity="here:3:0123456789ab")
    scheduler.start()
    try:
        wait_until(lambda: redis.zscore(keys.SCHEDULERS, "here:3:0123456789ab") is not None, message="it polled")
    finally:
        # When it stops
        scheduler.stop(time.monotonic() + 5)
    # Then its entry is gone: the others take its turns at once
    assert redis.zscore(keys.SCHEDULERS, "here:3:0123456789ab") is None
