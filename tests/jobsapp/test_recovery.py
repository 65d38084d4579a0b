"""The orphan sweeper in-process, on a manual clock: its ~15 s rounds pass in milliseconds."""

from __future__ import annotations

import itertools
import json
import logging
import random

from jobsapp import keys
from jobsapp.connection import get_redis
from jobsapp.payload import RECOVERED_KEY
from jobsapp.worker.recovery import Sweeper, recover_list
from tests.manual_clock import ManualClock
from tests.redis_down import unreachable_redis
from tests.testapp.jobs import Noop

DEAD = "deadhost:1:aaaaaaaaaaaa"
LIVE = "livehost:2:bbbbbbbbbbbb"
SELF = "thishost:3:cccccccccccc"


def job(number: int) -> str:
    return json.dumps({"class": Noop.wire_name(), "args": [number], "queue": "default", "jid": f"{number:024x}"})


def sweeper_on(clock: ManualClock, *, client=None, ready=lambda: True, identity: str = SELF) -> Sweeper:
    return Sweeper(
        client=client or get_redis(),
        identity=identity,
        interval_seconds=15.0,
        lock_seconds=60.0,
        ready=ready,
        rng=random.Random(7),
        clock=clock,
    )


def test_a_round_puts_back_the_jobs_of_a_process_whose_heartbeat_expired_and_only_those(redis):
    # Given a dead process's in-flight list (no heartbeat key) and a live one's
    redis.lpush(keys.inflight(DEAD), job(1), job(2))
    redis.lpush(keys.inflight(LIVE), job(3))
    redis.sadd(keys.INFLIGHT_INDEX, DEAD, LIVE)
    redis.hset(keys.process(LIVE), "beat", "1")
    clock = ManualClock()
    sweeper = sweeper_on(clock)
    sweeper.start()
    try:
        # When it has started, Then it waits for its turn: alone in the fleet, within one interval
        clock.settle(1)
        (first,) = clock.waits
        assert 0 < first <= 15.0
        assert redis.llen(keys.inflight(DEAD)) == 2
        # When that interval passes
        clock.advance_and_settle(first)
        # Then the dead process's jobs are back on their queue, marked as recovered
        assert redis.llen(keys.inflight(DEAD)) == 0
        requeued = [json.loads(raw) for raw in redis.lrange(keys.queue("default"), 0, -1)]
        assert sorted(item["args"][0] for item in requeued) == [1, 2]
        assert all(item[RECOVERED_KEY] == 1 for item in requeued)
        # And the live process's job is untouched, and the next round is its next turn: alone in
        # the fleet, within one interval
        assert redis.llen(keys.inflight(LIVE)) == 1
        assert 0 < clock.waits[-1] <= 15.0
    finally:
        sweeper.stop()


def test_a_sweeper_whose_own_heartbeat_is_not_steady_judges_no_one(redis):
    # Given a dead process's list, and a sweeper whose process has not beaten twice in a row
    redis.lpush(keys.inflight(DEAD), job(1))
    redis.sadd(keys.INFLIGHT_INDEX, DEAD)
    clock = ManualClock()
    sweeper = sweeper_on(clock, ready=lambda: False)
    sweeper.start()
    try:
        clock.settle(1)
        # When a round passes, Then nothing moved
        clock.advance_and_settle(clock.waits[0])
        assert redis.llen(keys.inflight(DEAD)) == 1
    finally:
        sweeper.stop()


def test_an_outage_is_logged_once_and_rounds_keep_their_interval(caplog):
    # Given a sweeper whose Redis does not answer
    caplog.set_level(logging.INFO, logger="jobsapp.recovery")
    clock = ManualClock()
    sweeper = sweeper_on(clock, client=unreachable_redis())
    sweeper.start()
    try:
        clock.settle(1)
        # When three rounds pass
        for _ in range(3):
            clock.advance_and_settle(clock.waits[-1])
        # Then one warning for the whole outage, and each next round still a jittered interval
        warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
        assert len(warnings) == 1 and warnings[0].startswith("sweeper: Redis unavailable"), warnings
        assert all(7.5 <= seconds <= 22.5 for seconds in clock.waits)
        assert sweeper.backoff.failures == 3
    finally:
        sweeper.stop()


def test_recovered_jobs_go_back_in_the_order_they_were_taken(redis):
    # Given a dead process's in-flight list of five jobs, fetched 1 to 5 (the newest at the left)
    redis.lpush(keys.inflight(DEAD), *[job(number) for number in range(1, 6)])
    # When it is recovered
    assert recover_list(get_redis(), DEAD) == (5, 0)
    # Then they are at the front of their queue in their order: 1 is taken first again
    taken_next = [json.loads(raw)["args"][0] for raw in reversed(redis.lrange(keys.queue("default"), 0, -1))]
    assert taken_next == [1, 2, 3, 4, 5]


def test_a_fleet_sweeps_once_per_interval_in_all_each_process_in_turn(redis):
    # Given three live processes taking turns (their schedulers' entries in jobsapp:schedulers)
    seconds, microseconds = redis.time()
    now = seconds + microseconds / 1_000_000
    fleet = ["host:1:aaaaaaaaaaaa", "host:2:bbbbbbbbbbbb", "host:3:cccccccccccc"]
    redis.zadd(keys.SCHEDULERS, dict.fromkeys(fleet, now))
    clock = ManualClock()
    # When each one's sweeper asks for its next turn
    turns = sorted(now + sweeper_on(clock, identity=identity).next_turn_seconds() for identity in fleet)
    # Then each one waits at most three intervals, and their turns fall one interval apart: the
    # fleet sweeps every 15 s, not each process every 15 s
    assert all(now < turn <= now + 45.5 for turn in turns)
    gaps = [later - earlier for earlier, later in itertools.pairwise(turns)]
    assert all(abs(gap - 15.0) < 0.5 for gap in gaps), gaps


def test_a_sweeper_whose_scheduler_has_not_polled_yet_counts_itself_in(redis):
    # Given two processes in jobsapp:schedulers, and a third that is not there yet
    seconds, microseconds = redis.time()
    now = seconds + microseconds / 1_000_000
    redis.zadd(keys.SCHEDULERS, {"host:1:aaaaaaaaaaaa": now, "host:2:bbbbbbbbbbbb": now})
    # When its sweeper asks for its next turn
    wait = sweeper_on(ManualClock(), identity="host:3:cccccccccccc").next_turn_seconds()
    # Then it takes a turn of a fleet of three
    assert 0 < wait <= 45.5
