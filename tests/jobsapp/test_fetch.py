"""Queue order (Sidekiq's strict and weighted rules), the fetch script's batch move, and basic
fetch (Sidekiq's per-thread BRPOP) in a real worker."""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter

import pytest
from django.core.management import CommandError, call_command

from jobsapp import client
from jobsapp.connection import CONNECTION_ERRORS as redis_errors
from jobsapp.connection import get_redis, new_redis
from jobsapp.worker.fetch import BasicFetch, QueueOrder, ReliableFetch
from tests.testapp.jobs import RAN_KEY, Record
from tests.workers import WorkerProcess, wait_until


def ran(redis) -> list[str]:
    return [value.decode() for value in redis.lrange(RAN_KEY, 0, -1)]


def test_no_weights_is_strict_order():
    order = QueueOrder.parse(["critical", "default", "low"])
    assert order.strict and order.order(random.Random(1)) == ["critical", "default", "low"]


def test_weights_make_a_weighted_random_order_like_sidekiq():
    # Given -q critical,3 -q default: critical comes first about 3 times in 4
    order = QueueOrder.parse(["critical,3", "default"])
    rng = random.Random(7)
    firsts = Counter(order.order(rng)[0] for _ in range(4000))
    assert not order.strict
    assert 0.70 < firsts["critical"] / 4000 < 0.80
    assert order.describe() == "critical (weight 3), default (weight 1)"


@pytest.mark.parametrize("spec", [",3", "a,0", "a,x"])
def test_bad_queue_specs_are_refused(spec):
    with pytest.raises(ValueError):
        QueueOrder.parse([spec])


def test_runworkers_refuses_bad_flags():
    with pytest.raises(CommandError, match="bad -q value"):
        call_command("runworkers", "-q", "a,0")
    with pytest.raises(CommandError, match="at least 1"):
        call_command("runworkers", "-c", "0")


def test_fetch_moves_a_batch_across_queues_in_order_into_in_flight(redis):
    for index in range(3):
        client.push({"class": "X", "args": [index], "queue": "high"})
    for index in range(5):
        client.push({"class": "X", "args": [index], "queue": "low"})
    redis.sadd("jobsapp:paused", "paused")
    client.push({"class": "X", "args": [0], "queue": "paused"})
    fetch = ReliableFetch(
        "host:1:abcdefabcdef",
        QueueOrder.parse(["high", "paused", "low"]),
        client=get_redis(),
        blocking_client=get_redis(),
        rng=random.Random(1),
        make_blocking_client=get_redis,
    )
    units = fetch.take(6, block_seconds=0)
    # Then the oldest jobs come first, high before low, the paused queue untouched
    assert [unit.queue for unit in units] == ["high"] * 3 + ["low"] * 3
    assert redis.llen("jobsapp:inflight:host:1:abcdefabcdef") == 6
    assert redis.llen("queue:low") == 2 and redis.llen("queue:paused") == 1
    # And a requeue puts them back at the front in their order, in flight no more
    assert fetch.requeue(units[3:]) == 3
    assert redis.llen("queue:low") == 5 and redis.llen("jobsapp:inflight:host:1:abcdefabcdef") == 3
    taken_next = [json.loads(raw)["args"][0] for raw in reversed(redis.lrange("queue:low", 0, -1))]
    assert taken_next == [0, 1, 2, 3, 4]


def test_basic_fetch_reads_paused_queues_once_a_second_not_per_job(redis):
    # Given basic fetch on two queues, with a clock the test moves
    now = [100.0]
    fetch = BasicFetch(
        QueueOrder.parse(["a", "b"]), client=get_redis(), make_blocking_client=new_redis, rng=random.Random(1), clock=lambda: now[0]
    )
    for index in range(3):
        client.push({"class": "X", "args": [index], "queue": "a"})
    client.push({"class": "X", "args": [0], "queue": "b"})
    assert fetch.take(1, block_seconds=1)[0].queue == "a"
    # When queue a is paused, Then the next fetch within the second still takes from it (no read per job)
    redis.sadd("jobsapp:paused", "a")
    assert fetch.take(1, block_seconds=1)[0].queue == "a"
    # And once a second has passed the pause is seen: queue b is served, a is left alone
    now[0] += 1.0
    assert fetch.take(1, block_seconds=1)[0].queue == "b"
    assert redis.llen("queue:a") == 1


def blocked_brpops(redis) -> int:
    """How many connections wait in BRPOP right now."""
    return sum(1 for entry in redis.client_list() if entry.get("cmd") == "brpop" and "b" in entry.get("flags", ""))


@pytest.mark.standalone_only  # counts and kills connections with CLIENT LIST/KILL on one server
@pytest.mark.slow
def test_basic_fetch_each_thread_blocks_in_its_own_brpop_and_runs_jobs_in_strict_order(redis_server, redis):
    # Given an idle worker with basic fetch and three threads on two queues
    with WorkerProcess(["--fetch", "basic", "-q", "high", "-q", "low", "-c", "3"], redis_url=redis_server.url) as worker:
        # Then each thread waits in a BRPOP of its own (no fetcher thread hands jobs over)
        wait_until(lambda: blocked_brpops(redis) == 3, message="three threads blocked in BRPOP")
        # When jobs arrive on both queues
        for index in range(5):
            Record.set(queue="low").perform_async(f"low{index}")
        Record.set(queue="high").perform_async("high")
        # Then every job runs, is counted, and nothing is in flight (basic fetch has no list)
        wait_until(lambda: redis.llen(RAN_KEY) == 6, message="all jobs ran")
        wait_until(lambda: redis.get("stat:processed") == b"6", message="stats flushed")
        assert not redis.exists(f"jobsapp:inflight:{worker.identity}")
        assert not redis.sismember("jobsapp:inflight", worker.identity)
    # And with one thread, a job of the first queue always comes before one of the second
    redis.delete(RAN_KEY)
    for index in range(3):
        Record.set(queue="low").perform_async(f"low{index}")
        Record.set(queue="high").perform_async(f"high{index}")
    with WorkerProcess(["--fetch", "basic", "-q", "high", "-q", "low", "-c", "1"], redis_url=redis_server.url):
        wait_until(lambda: redis.llen(RAN_KEY) == 6, message="all jobs ran")
    assert ran(redis)[:3] == ["high0", "high1", "high2"]


@pytest.mark.standalone_only  # counts and kills connections with CLIENT LIST/KILL on one server
@pytest.mark.slow
def test_quiet_basic_fetch_worker_takes_nothing_more_and_stops_at_once(redis_server, redis):
    # Given an idle basic-fetch worker whose threads wait in BRPOP
    worker = WorkerProcess(["--fetch", "basic", "-c", "4"], redis_url=redis_server.url).start()
    try:
        wait_until(lambda: blocked_brpops(redis) == 4, message="four threads blocked in BRPOP")
        # When it is quieted, Then no thread waits in BRPOP any more and a new job stays queued
        worker.signal(signal.SIGTSTP)
        wait_until(lambda: blocked_brpops(redis) == 0, timeout_seconds=2, message="the BRPOPs were unblocked")
        Record.perform_async("after quiet")
        time.sleep(0.5)
        assert redis.llen("queue:default") == 1 and redis.llen(RAN_KEY) == 0
    finally:
        # And TERM ends it without waiting out a BRPOP timeout
        started = time.monotonic()
        worker.stop()
    assert time.monotonic() - started < 5


@pytest.mark.slow
def test_basic_fetch_skips_a_paused_queue(redis_server, redis):
    # Given a paused queue holding a job, and a job on a running one
    redis.sadd("jobsapp:paused", "paused")
    Record.set(queue="paused").perform_async("waits")
    Record.perform_async("runs")
    with WorkerProcess(["--fetch", "basic", "-q", "paused", "-q", "default", "-c", "2"], redis_url=redis_server.url) as worker:
        # Then only the running queue's job runs
        wait_until(lambda: redis.llen(RAN_KEY) == 1, message=f"the running queue's job ran: {worker.output}")
        time.sleep(0.5)
        assert ran(redis) == ["runs"] and redis.llen("queue:paused") == 1
        # And once resumed, its job runs within the pause cache's second (plus a BRPOP's wait)
        redis.srem("jobsapp:paused", "paused")
        wait_until(lambda: redis.llen(RAN_KEY) == 2, timeout_seconds=5)


@pytest.mark.standalone_only  # counts and kills connections with CLIENT LIST/KILL on one server
def test_basic_fetch_reconnects_after_its_connection_is_killed(redis):
    # Given basic fetch whose thread holds its own connection for its BRPOPs
    fetch = BasicFetch(QueueOrder.parse(["a"]), client=get_redis(), make_blocking_client=new_redis, rng=random.Random(1))
    client.push({"class": "X", "args": [1], "queue": "a"})
    assert fetch.take(1, block_seconds=1)[0].queue == "a"
    (first_id,) = fetch._blocking_ids
    # When Redis drops that connection, Then the next take reports it (nothing was popped)
    redis.client_kill_filter(_id=first_id)
    client.push({"class": "X", "args": [2], "queue": "a"})
    with pytest.raises(redis_errors):
        fetch.take(1, block_seconds=1)
    assert redis.llen("queue:a") == 1
    # And the one after opens a new connection, which quiet can unblock, and takes the job
    assert fetch.take(1, block_seconds=1)[0].raw.startswith(b"{")
    assert fetch._blocking_ids and first_id not in fetch._blocking_ids
