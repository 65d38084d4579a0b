"""The acker's ``stop(deadline)``: the lifecycle of the engine's components (``jobsapp.component``),
against a real Redis that holds the last batch (``CLIENT PAUSE``)."""

from __future__ import annotations

import random
import threading
import time

from jobsapp import connection
from jobsapp.connection import get_redis
from jobsapp.worker.acker import Acker
from jobsapp.worker.fetch import QueueOrder, ReliableFetch, UnitOfWork
from jobsapp.worker.heartbeat import new_identity
from jobsapp.worker.processor import Result
from tests.workers import wait_until

PAUSE_MILLISECONDS = 3000


def reliable_fetch() -> ReliableFetch:
    return ReliableFetch(
        new_identity(),
        QueueOrder.parse(["default"]),
        client=get_redis(),
        blocking_client=connection.new_redis(blocking_timeout_seconds=1.0),
        rng=random.Random(7),
        make_blocking_client=lambda: connection.new_redis(blocking_timeout_seconds=1.0),
    )


def test_stop_returns_at_its_deadline_while_redis_holds_the_last_batch(redis):
    # Given a finished job still in flight, and a Redis that holds every write for 3 s
    fetch = reliable_fetch()
    raw = b'{"class":"app.jobs.X","args":[],"jid":"a1b2c3d4e5f6a1b2c3d4e5f6","queue":"default"}'
    redis.lpush(fetch.inflight_key, raw)
    acker = Acker(fetch, stop_event=threading.Event())
    acker.start()
    redis.execute_command("CLIENT", "PAUSE", PAUSE_MILLISECONDS, "WRITE")
    try:
        acker.record(
            UnitOfWork(raw, "default"),
            Result(jid="a1b2c3d4e5f6a1b2c3d4e5f6", acknowledge=True, failed=False, job_class="app.jobs.X", elapsed_seconds=0.01),
        )
        # When the acker is stopped with a deadline half a second away
        started = time.monotonic()
        acker.stop(started + 0.5)
        returned_after_seconds = time.monotonic() - started
    finally:
        redis.execute_command("CLIENT", "UNPAUSE")
    # Then stop returned at its deadline, not when Redis took the batch nor at its 10 s cap
    assert returned_after_seconds < PAUSE_MILLISECONDS / 1000 - 0.5
    # And the batch, on its way, still reaches Redis: the job is acknowledged and counted
    wait_until(lambda: redis.llen(fetch.inflight_key) == 0, message="the last batch acknowledged")
    wait_until(lambda: redis.get("stat:processed") == b"1", message="the job counted")


def test_a_held_ack_waits_for_its_release_and_a_thread_that_does_not_collect_holds_nothing(redis):
    from jobsapp import acks, hold_ack

    # Given a thread that does not collect holds: hold_ack refuses (its caller waits itself)
    assert hold_ack(lambda timeout_seconds: True) is False
    # Given a processor-like thread that collects holds, whose job held its ack on a write
    fetch = reliable_fetch()
    raw = b'{"class":"app.jobs.X","args":[],"jid":"b1b2c3d4e5f6a1b2c3d4e5f6","queue":"default"}'
    redis.lpush(fetch.inflight_key, raw)
    acker = Acker(fetch, stop_event=threading.Event())
    acker.start()
    durable = threading.Event()
    acks.collect()
    try:
        assert hold_ack(lambda timeout_seconds: durable.wait(timeout_seconds)) is True
        acker.record(
            UnitOfWork(raw, "default"),
            Result(jid="b1b2c3d4e5f6a1b2c3d4e5f6", acknowledge=True, failed=False, job_class="app.jobs.X", elapsed_seconds=0.01),
        )
        # When the write is not durable yet, Then the job stays in flight
        time.sleep(0.3)
        assert redis.llen(fetch.inflight_key) == 1
        # When it becomes durable, Then the job is acknowledged
        durable.set()
        wait_until(lambda: redis.llen(fetch.inflight_key) == 0, message="acknowledged once released")
    finally:
        acks.stop_collecting()
        acker.stop(time.monotonic() + 2)
