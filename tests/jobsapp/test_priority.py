"""Priorities within a queue (jobsapp.priority): higher first, FIFO within one priority, kept
through the scheduler, retries, requeues and recovery; plain jobs keep Sidekiq's layout."""

from __future__ import annotations

import json
import logging
import random
import time

import pytest

from jobsapp import client, keys, scripts
from jobsapp.connection import get_redis, new_redis
from jobsapp.worker.fetch import BasicFetch, QueueOrder, ReliableFetch
from jobsapp.worker.recovery import recover_list
from jobsapp.worker.scheduler import Scheduler
from tests.testapp.jobs import RAN_KEY, Explode, Record
from tests.workers import WorkerProcess, wait_until

IDENTITY = "host:1:0123456789ab"


def ran(redis) -> list[str]:
    return [value.decode() for value in redis.lrange(RAN_KEY, 0, -1)]


def reliable_fetch(identity: str = IDENTITY) -> ReliableFetch:
    return ReliableFetch(
        identity,
        QueueOrder.parse(["default"]),
        client=get_redis(),
        blocking_client=new_redis(),
        rng=random.Random(1),
        make_blocking_client=new_redis,
    )


def test_a_job_without_a_priority_or_with_priority_0_keeps_sidekiqs_layout_byte_for_byte(redis):
    # Given the same job pushed without a priority and with priority 0
    item = {"class": "HardWorker", "args": [1, "two"], "jid": "0123456789abcdef01234567", "created_at": 1700000000.5}
    client.push(dict(item))
    client.push({**item, "priority": 0})
    client.push({**item, "priority": None})
    # Then all are in queue:default, the same bytes but for enqueued_at, with no "priority" key
    raws = redis.lrange("queue:default", 0, -1)
    assert len(raws) == 3
    decoded = [json.loads(raw) for raw in raws]
    assert all("priority" not in job for job in decoded)
    texts = {raw.replace(json.dumps(job["enqueued_at"]).encode(), b"T") for raw, job in zip(raws, decoded, strict=True)}
    assert len(texts) == 1
    # And nothing of ours was written: no priority ZSET, no index entry
    assert redis.exists("jobsapp:pqueue:default") == 0 and redis.scard("jobsapp:prioritised") == 0


def test_a_bad_priority_is_refused_and_nothing_is_written(redis):
    for bad in (101, -101, 1.5, "high", True):
        with pytest.raises(ValueError, match="priority must be a whole number"):
            client.push({"class": "X", "args": [], "priority": bad})
    with pytest.raises(ValueError, match="priority must be a whole number"):
        Record.set(priority=200).perform_async("x")
    assert redis.llen("queue:default") == 0 and redis.exists("jobsapp:pqueue:default") == 0


def test_a_unique_job_with_a_priority_is_refused(redis):
    with pytest.raises(ValueError, match="cannot have a priority"):
        client.push({"class": "X", "args": [], "priority": 5, "unique_for": 60})
    assert redis.exists("jobsapp:pqueue:default") == 0


def test_a_worker_runs_higher_priorities_first_and_one_priority_in_push_order(redis, redis_server):
    # Given jobs of several priorities pushed in this order (plain ones are priority 0)
    Record.perform_async("plain-1")
    Record.set(priority=-5).perform_async("low-1")
    Record.set(priority=10).perform_async("ten-1")
    client.push({"class": Record.wire_name(), "args": ["ten-2"], "priority": 10})
    Record.set(priority=50).perform_async("fifty")
    Record.perform_async("plain-2")
    client.push_bulk({"class": Record.wire_name(), "args": [["low-2"], ["low-3"]], "priority": -5})
    Record.set(priority=10).perform_async("ten-3")
    assert redis.llen("queue:default") == 2 and redis.zcard("jobsapp:pqueue:default") == 7
    # When one worker thread runs them
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url):
        wait_until(lambda: len(ran(redis)) == 9, timeout_seconds=20)
    # Then higher priorities ran first, each priority in push order, plain jobs between 10 and -5
    assert ran(redis) == ["fifty", "ten-1", "ten-2", "ten-3", "plain-1", "plain-2", "low-1", "low-2", "low-3"]
    # And the priority ZSET and its index entry are gone once empty
    assert redis.exists("jobsapp:pqueue:default") == 0 and redis.scard("jobsapp:prioritised") == 0


def test_sidekiq_options_priority_is_the_default_of_a_class(redis):
    from tests.testapp.jobs import Prioritised

    # Given a class declared with sidekiq_options(priority=20), When it is pushed
    jid = Prioritised.perform_async("x")
    # Then its job waits in the priority ZSET with its priority in the payload
    members = redis.zrange("jobsapp:pqueue:default", 0, -1)
    assert [(json.loads(member)["jid"], json.loads(member)["priority"]) for member in members] == [(jid, 20)]
    # And set(priority=0) makes one push a plain job
    plain_jid = Prioritised.set(priority=0).perform_async("y")
    assert json.loads(redis.lindex("queue:default", 0))["jid"] == plain_jid


def test_a_scheduled_job_keeps_its_priority_when_the_scheduler_moves_it(redis):
    # Given a plain job queued, and a prioritised job scheduled in the past (due now)
    Record.perform_async("plain")
    Record.set(priority=7).perform_at(time.time() + 0.2, "scheduled")
    member = redis.zrange("schedule", 0, -1)[0]
    assert json.loads(member)["priority"] == 7
    time.sleep(0.3)
    # When the scheduler moves it
    moved, _ = Scheduler(client=get_redis(), poll_interval_seconds=1).enqueue_due()
    # Then it is in the priority ZSET, indexed, and the fetch takes it before the plain job
    assert moved == 1 and redis.zcard("jobsapp:pqueue:default") == 1 and redis.sismember("jobsapp:prioritised", "default")
    fetched = reliable_fetch().take(2, block_seconds=0)
    assert [json.loads(unit.raw)["args"] for unit in fetched] == [["scheduled"], ["plain"]]


def test_a_failed_job_keeps_its_priority_through_the_retry_set(redis, redis_server):
    # Given a failing job of priority 30, When a worker runs it once
    jid = Explode.set(priority=30).perform_async("boom")
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url):
        wait_until(lambda: redis.zcard("retry") == 1, timeout_seconds=20)
    # Then the retry set's member still carries the priority
    member = redis.zrange("retry", 0, -1)[0]
    assert json.loads(member)["priority"] == 30 and json.loads(member)["jid"] == jid
    # When its retry is due and the scheduler moves it
    redis.zadd("retry", {member: 1.0})
    Record.perform_async("plain")
    Scheduler(client=get_redis(), poll_interval_seconds=1).enqueue_due()
    # Then it goes back to the priority ZSET, ahead of the plain job
    fetched = reliable_fetch().take(2, block_seconds=0)
    assert [json.loads(unit.raw)["args"] for unit in fetched] == [["boom"], ["plain"]] and json.loads(fetched[0].raw)["jid"] == jid


def test_a_requeued_prioritised_job_goes_to_the_front_of_its_priority(redis):
    # Given two jobs of priority 5 and one of 9; the fetch takes the 9 and the first 5
    Record.set(priority=5).perform_async("five-1")
    Record.set(priority=5).perform_async("five-2")
    Record.set(priority=9).perform_async("nine")
    fetch = reliable_fetch()
    taken = fetch.take(2, block_seconds=0)
    assert [json.loads(unit.raw)["args"] for unit in taken] == [["nine"], ["five-1"]]
    # When they are put back (a shutdown), Then each is in front of its priority again
    assert fetch.requeue(taken) == 2
    assert redis.llen(f"jobsapp:inflight:{IDENTITY}") == 0
    again = fetch.take(3, block_seconds=0)
    assert [json.loads(unit.raw)["args"] for unit in again] == [["nine"], ["five-1"], ["five-2"]]


def test_a_dead_processs_prioritised_job_is_recovered_into_its_priority(redis):
    # Given a prioritised job in the in-flight list of a process that died
    Record.set(priority=5).perform_async("five-1")
    Record.set(priority=5).perform_async("five-2")
    Record.perform_async("plain")
    taken = reliable_fetch().take(1, block_seconds=0)
    assert [json.loads(unit.raw)["args"] for unit in taken] == [["five-1"]]
    # When its list is recovered
    requeued, buried = recover_list(get_redis(), IDENTITY)
    # Then it is back in front of its priority, still ahead of the plain job
    assert (requeued, buried) == (1, 0)
    again = reliable_fetch("host:2:0123456789ab").take(3, block_seconds=0)
    assert [json.loads(unit.raw)["args"] for unit in again] == [["five-1"], ["five-2"], ["plain"]]
    assert json.loads(again[0].raw)["priority"] == 5


def test_a_paused_queue_keeps_its_prioritised_jobs(redis):
    # Given a paused queue holding a prioritised job
    Record.set(priority=5).perform_async("five")
    redis.sadd("jobsapp:paused", "default")
    # When a fetch runs, Then it takes nothing and says the queue is paused
    fetched = scripts.fetch(get_redis(), inflight_key=keys.inflight("x"), queue_names=["default"], count=5)
    assert fetched.jobs == [] and fetched.paused == frozenset({"default"})
    assert redis.zcard("jobsapp:pqueue:default") == 1


def test_basic_fetch_leaves_prioritised_jobs_and_says_so_once(redis, caplog):
    # Given a queue holding a prioritised job and a plain one, served by basic fetch
    Record.set(priority=5).perform_async("five")
    Record.perform_async("plain")
    fetch = BasicFetch(QueueOrder.parse(["default"]), client=get_redis(), make_blocking_client=new_redis, rng=random.Random(1))
    # When it takes jobs twice
    with caplog.at_level(logging.ERROR, logger="jobsapp.fetch"):
        first = fetch.take(1, block_seconds=1)
        second = fetch.take(1, block_seconds=0.1)
    # Then it takes the plain job only, and logs one ERROR naming the queue
    assert [json.loads(unit.raw)["args"] for unit in first] == [["plain"]] and second == []
    errors = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert errors == [
        "queue default holds prioritised jobs, which basic fetch does not take: run its workers with reliable fetch (the default)"
    ]
    assert redis.zcard("jobsapp:pqueue:default") == 1


def test_celerys_priority_maps_lower_first_onto_the_engines_scale(redis):
    from tests.testapp.tasks import celery_add

    # Given Celery's priorities on its Redis transport: 0 (the default, first) to 9 (last)
    # When tasks are sent with priority 9, 3 and none, and one with 0
    late = celery_add.apply_async((1, 1), priority=9)
    early = celery_add.apply_async((1, 2), priority=3)
    plain = celery_add.apply_async((1, 3))
    zero = celery_add.s(1, 4).set(priority=0).apply_async()
    # Then 9 and 3 ride as -90 and -30 in the priority ZSET; none and 0 are plain jobs
    ranked = [json.loads(member) for member in redis.zrange("jobsapp:pqueue:default", 0, -1)]
    assert [(job["jid"], job["priority"]) for job in ranked] == [(early.id, -30), (late.id, -90)]
    assert [json.loads(raw)["jid"] for raw in redis.lrange("queue:default", 0, -1)] == [zero.id, plain.id]
    # And a fetch takes the plain ones first, then 3, then 9 (lower first, as Celery's Redis transport)
    fetched = reliable_fetch().take(4, block_seconds=0)
    assert [json.loads(unit.raw)["jid"] for unit in fetched] == [plain.id, zero.id, early.id, late.id]
    # And outside 0..9 is refused
    with pytest.raises(ValueError, match="Celery's priority"):
        celery_add.apply_async((1, 1), priority=10)


def test_a_celery_tasks_own_priority_is_its_default(redis):
    from jobsapp.celery import shared_task

    # Given a task declared with Celery's task option priority=2
    @shared_task(name="priority-tests.declared", priority=2)
    def declared(value):
        return value

    # When it is sent without a priority, and once with priority=0
    default = declared.delay(1)
    overridden = declared.apply_async((2,), priority=0)
    # Then the first rides as -20, and the call's own priority wins for the second
    assert [json.loads(member)["jid"] for member in redis.zrange("jobsapp:pqueue:default", 0, -1)] == [default.id]
    assert json.loads(redis.zrange("jobsapp:pqueue:default", 0, -1)[0])["priority"] == -20
    assert [json.loads(raw)["jid"] for raw in redis.lrange("queue:default", 0, -1)] == [overridden.id]


def test_an_operators_retry_now_keeps_the_priority(redis):
    from jobsapp import api

    # Given a prioritised job failed into the retry set, and a plain job queued
    Record.perform_async("plain")
    member = json.dumps({"class": Record.wire_name(), "args": ["again"], "jid": "ab" * 12, "queue": "default", "priority": 8})
    redis.zadd("retry", {member: time.time() + 500})
    # When an operator retries it now
    assert api.RetrySet().retry(api.RetrySet().find_job("ab" * 12)) is True
    # Then it goes to the priority ZSET, taken before the plain job
    fetched = reliable_fetch().take(2, block_seconds=0)
    assert [json.loads(unit.raw)["args"] for unit in fetched] == [["again"], ["plain"]]


def test_a_queues_size_counts_and_its_clear_drops_its_prioritised_jobs(redis):
    from jobsapp import api

    # Given a queue with two plain jobs and three prioritised ones
    for value in ("a", "b"):
        Record.perform_async(value)
    for level in (5, -5, 50):
        Record.set(priority=level).perform_async(level)
    queue = api.Queue("default")
    # Then its size counts all five
    assert queue.size() == 5
    # When it is cleared, Then all five are dropped, and nothing of the priority structure is left
    assert queue.clear() == 5
    assert redis.exists("queue:default", "jobsapp:pqueue:default") == 0 and redis.scard("jobsapp:prioritised") == 0


def test_a_periodic_job_of_a_prioritised_class_runs_before_the_plain_jobs_waiting(redis, redis_server):
    from tests.testapp.jobs import Prioritised

    # Given a paused queue holding plain jobs, and a job every second of a class declared with priority=20
    redis.sadd("jobsapp:paused", "default")
    for index in range(5):
        Record.perform_async(f"plain-{index}")
    overrides = {"PERIODIC": {"urgent": {"class": Prioritised.wire_name(), "every": 1, "args": ["tick"]}}}
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url, env={"JOBSAPP_TEST_OVERRIDES": json.dumps(overrides)}):
        # When the worker ticks it, Then the tick is pushed with its class's priority, to the priority ZSET
        wait_until(lambda: redis.zcard("jobsapp:pqueue:default") >= 1, timeout_seconds=15)
        pushed = json.loads(redis.zrange("jobsapp:pqueue:default", 0, 0)[0])
        assert pushed["priority"] == 20 and pushed["periodic"] == "urgent"
        assert redis.llen("queue:default") == 5
        # And once the queue is resumed, the tick runs before the plain jobs pushed earlier
        redis.srem("jobsapp:paused", "default")
        wait_until(lambda: len(ran(redis)) >= 6, timeout_seconds=15)
    assert ran(redis)[0] == "tick"
    assert [value for value in ran(redis) if value != "tick"] == [f"plain-{index}" for index in range(5)]


def test_a_batch_callback_of_a_prioritised_class_runs_before_the_plain_jobs_waiting(redis, redis_server):
    from jobsapp.batch import Batch
    from tests.testapp.jobs import BatchMember, PrioritisedBatchDone

    # Given a batch of 3 jobs whose on_success class is declared with priority=30 on the queue
    # "callbacks", which is paused and holds plain jobs
    redis.sadd("jobsapp:paused", "callbacks")
    for index in range(3):
        Record.set(queue="callbacks").perform_async(f"plain-{index}")
    batch = Batch(on_success=PrioritisedBatchDone)
    with batch.jobs():
        BatchMember.set(queue="members").perform_bulk([["a"], ["b"], ["c"]])
    with WorkerProcess(["-c", "1", "-q", "members", "-q", "callbacks"], redis_url=redis_server.url):
        # When a real worker runs the batch, Then its callback is pushed with its class's priority
        wait_until(lambda: redis.zcard("jobsapp:pqueue:callbacks") == 1, timeout_seconds=15)
        callback = json.loads(redis.zrange("jobsapp:pqueue:callbacks", 0, 0)[0])
        assert callback["class"] == PrioritisedBatchDone.wire_name() and callback["priority"] == 30
        assert callback["args"] == [batch.bid, {"total": 3, "succeeded": 3, "failed": 0}]
        # And once its queue is resumed, it runs before the plain jobs pushed earlier
        redis.srem("jobsapp:paused", "callbacks")
        wait_until(lambda: len(ran(redis)) == 7, timeout_seconds=15)
    assert ran(redis)[3:] == ["callback:3", "plain-0", "plain-1", "plain-2"]


def test_a_chords_unlock_has_its_callbacks_priority(redis, redis_server):
    from jobsapp.celery import chord
    from tests.testapp.tasks import celery_collect, celery_pause_own_queue

    # Given a chord whose header task pauses its queue as it ends, and whose callback has
    # Celery's priority 5 (after the plain jobs: -50 on the engine's scale)
    chorded = chord([celery_pause_own_queue.s(7)], celery_collect.s().set(priority=5)).apply_async()
    with WorkerProcess(["-c", "1", "-q", "chords", "-q", "default"], redis_url=redis_server.url):
        # When a real worker runs the header, Then the unlock waits in the queue's priority ZSET
        # at the callback's priority
        wait_until(lambda: redis.zcard("jobsapp:pqueue:chords") == 1, timeout_seconds=15)
        unlock = json.loads(redis.zrange("jobsapp:pqueue:chords", 0, 0)[0])
        assert unlock["class"] == "celery.chord_unlock" and unlock["priority"] == -50
        assert redis.llen("queue:chords") == 0
        # And once the queue is resumed, the callback runs with the header's values
        redis.srem("jobsapp:paused", "chords")
        assert chorded.get(timeout=15) == {"values": [7], "extra": []}


@pytest.mark.parametrize("queues", [["default"], ["default", "other"]])
def test_an_idle_worker_that_has_seen_priorities_is_woken_by_a_prioritised_push(redis, redis_server, queues):
    # Given an idle worker whose blocking wait lasts 60 s, and that has run a prioritised job
    env = {"JOBSAPP_TEST_OVERRIDES": json.dumps({"FETCH_BLOCK_SECONDS": 60})}
    flags = [flag for name in queues for flag in ("-q", name)]
    Record.set(priority=5).perform_async("first")
    with WorkerProcess(["-c", "1", *flags], env=env, redis_url=redis_server.url):
        wait_until(lambda: ran(redis) == ["first"], timeout_seconds=20)
        time.sleep(0.5)  # idle now: blocked on its queues' lists and wake lists
        # When a prioritised job is pushed, Then it runs long before the 60 s wait would end
        Record.set(priority=5).perform_async("second")
        wait_until(lambda: ran(redis) == ["first", "second"], timeout_seconds=15)
        # And a plain push still wakes it
        Record.perform_async("plain")
        wait_until(lambda: ran(redis) == ["first", "second", "plain"], timeout_seconds=15)


def test_a_process_that_has_seen_priorities_keeps_its_look_ahead_short():
    from jobsapp.worker.dispatch import Occupancy

    # Given a process whose 2 threads both run jobs of 50 ms, whose fetches were measured slow (20 ms)
    occupancy = Occupancy(concurrency=2, capacity=100, async_lane=None, async_lately=False)
    occupancy.running = {1: None, 2: None}  # type: ignore[dict-item]
    occupancy.job_seconds = 0.05
    # When it serves plain jobs only, Then it looks ahead by four round trips of its threads' work
    assert occupancy.fetch_target(0.02) == 3
    # When it has seen prioritised jobs, Then it holds no job none of its threads can start: a
    # prioritised push waits for one running job at most, not for the look-ahead as well
    assert occupancy.fetch_target(0.02, prioritised=True) == 0
    # And jobs of a millisecond on 10 idle threads still come many to a fetch
    occupancy.concurrency, occupancy.running, occupancy.job_seconds = 10, {}, 0.001
    assert occupancy.fetch_target(0.02, prioritised=True) == 10 + 50
