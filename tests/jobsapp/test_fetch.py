"""Queue order (Sidekiq's strict and weighted rules) and the fetch script's batch move."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from django.core.management import CommandError, call_command

from jobsapp import client
from jobsapp.connection import get_redis
from jobsapp.fetch import BasicFetch, QueueOrder, ReliableFetch


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
    # And a requeue puts them back at the front, in flight no more
    assert fetch.requeue(units[3:]) == 3
    assert redis.llen("queue:low") == 5 and redis.llen("jobsapp:inflight:host:1:abcdefabcdef") == 3


def test_basic_fetch_reads_paused_queues_once_a_second_not_per_job(redis):
    # Given basic fetch on two queues, with a clock the test moves
    now = [100.0]
    fetch = BasicFetch(
        QueueOrder.parse(["a", "b"]), client=get_redis(), blocking_client=get_redis(), rng=random.Random(1), clock=lambda: now[0]
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
