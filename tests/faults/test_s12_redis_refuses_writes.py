"""Scenario 12: Redis up but refusing writes (issue 14): at ``maxmemory`` with ``noeviction``
(OOM), a replica after a failover (READONLY).

A producer must get ``RedisUnavailable`` with the reason (HTTP 503 through the middleware, not
500), a bulk push must say how many jobs it wrote, and a worker starting while Redis is full
must wait it out as it waits out an outage, not die at its first write.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from django.test import Client

from jobsapp import RedisUnavailable, client, connection, keys
from tests.redis_server import RedisServer
from tests.testapp.jobs import Noop
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db

#: Room left above what Redis already uses, in bytes: some jobs fit, then OOM.
HEADROOM_BYTES = 300_000
#: The bulk push test's room: some of its 2 MB fit, not all.
BULK_HEADROOM_BYTES = 1_000_000


@pytest.fixture
def tiny_redis(settings) -> Iterator[RedisServer]:
    """A throwaway server with ``noeviction`` and a ``maxmemory`` just above what it uses."""
    server = RedisServer().start()
    raw = server.client()
    raw.config_set("maxmemory-policy", "noeviction")
    raw.config_set("maxmemory", int(raw.info("memory")["used_memory"]) + HEADROOM_BYTES)
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": server.url}
    connection.reset()
    yield server
    connection.reset()
    server.stop()


def fill(server: RedisServer) -> None:
    """Write small values until Redis answers OOM: the stored data alone is then over the limit
    (a big value's request buffer would count only while it is read)."""
    raw = server.client()
    for index in range(10_000):
        try:
            raw.set(f"ballast:{index}", b"x" * 1000)
        except redis.exceptions.OutOfMemoryError:
            # and clearly over the limit, so no small write slips through while we test
            raw.config_set("maxmemory", int(raw.info("memory")["used_memory"]) - 100_000)
            return
    raise AssertionError("Redis never refused a write")


def test_a_push_to_a_full_redis_raises_redis_unavailable_with_the_reason(tiny_redis):
    # Given Redis at maxmemory, When a job is enqueued, Then RedisUnavailable says why
    fill(tiny_redis)
    with pytest.raises(RedisUnavailable, match="refuses writes: OOM"):
        Noop.perform_async()
    assert tiny_redis.client().llen("queue:default") == 0


def test_a_bulk_push_that_fills_redis_says_how_many_jobs_it_wrote(tiny_redis):
    # Given 100 jobs of 20 KB and room for only some of them (1 MB: a batch of 10 fits with its query
    # buffer, which Redis counts while it reads the command and grows in doubling steps; the fixture's
    # 300 KB was sometimes too little for the first batch), When they are pushed 10 per batch
    raw = tiny_redis.client()
    raw.config_set("maxmemory", int(raw.info("memory")["used_memory"]) + BULK_HEADROOM_BYTES)
    with pytest.raises(RedisUnavailable) as refused:
        client.push_bulk({"class": "tests.testapp.jobs.Noop", "args": [["y" * 20_000] for _ in range(100)]}, batch_size=10)
    # Then the error says how many were written, which is what the queue holds
    written = tiny_redis.client().llen("queue:default")
    assert 0 < written < 100
    assert f"({written} of 100 jobs were written before the failure)" in str(refused.value)
    assert "OOM" in str(refused.value)


def test_a_view_enqueueing_into_a_full_redis_answers_503(tiny_redis, settings):
    from tests.security import enqueue_view

    fill(tiny_redis)
    settings.ROOT_URLCONF = enqueue_view
    response = Client(raise_request_exception=False).post("/enqueue/")
    assert response.status_code == 503
    assert b"Redis is unavailable" in response.content


def test_a_push_to_a_read_only_replica_raises_redis_unavailable(tiny_redis):
    # Given a server turned into a replica (of a master that does not exist: it stays read-only)
    tiny_redis.client().replicaof("127.0.0.1", "1")
    # When a job is enqueued, Then RedisUnavailable says READONLY
    with pytest.raises(RedisUnavailable, match="READONLY"):
        Noop.perform_async()


@pytest.mark.slow
def test_a_worker_started_while_redis_is_full_waits_then_runs(tiny_redis):
    # Given Redis at maxmemory, and a job already queued
    raw = tiny_redis.client()
    raw.lpush("queue:default", json.dumps({"class": Noop.wire_name(), "args": [], "jid": "c" * 24}))
    fill(tiny_redis)
    # When a worker starts, and memory is freed eight seconds later (well after it started up)
    threading.Timer(8.0, lambda: raw.delete(*raw.keys("ballast:*"))).start()
    started = time.monotonic()
    with WorkerProcess(["-c", "1"], redis_url=tiny_redis.url, start_timeout_seconds=30) as worker:
        # Then it waited (instead of dying at its first write) and runs the job
        assert time.monotonic() - started >= 7.5
        deadline = time.monotonic() + 10
        while raw.llen("queue:default") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert raw.llen("queue:default") == 0
        output = worker.output
    assert output.count("refuses or does not answer") == 1, output[-2000:]


@pytest.mark.slow
def test_a_running_worker_logs_a_refusing_redis_once_per_outage_and_resumes(tiny_redis):
    # Given a running worker
    raw = tiny_redis.client()
    with WorkerProcess(["-c", "1"], redis_url=tiny_redis.url) as worker:
        # When Redis refuses writes for four seconds (its fetches retry with backoff meanwhile)
        fill(tiny_redis)
        time.sleep(4.0)
        raw.config_set("maxmemory", 0)  # no limit: writes are accepted again
        # Then the worker runs a job pushed afterwards, having warned once for the whole outage
        raw.lpush("queue:default", json.dumps({"class": Noop.wire_name(), "args": [], "jid": "d" * 24}))
        deadline = time.monotonic() + 15
        while raw.llen("queue:default") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert raw.llen("queue:default") == 0
        output = worker.output
    warnings = [line for line in output.splitlines() if "WARNING" in line and "fetch: Redis" in line]
    assert len(warnings) == 1, output[-3000:]


@pytest.mark.slow
def test_a_full_redis_still_takes_finished_jobs_out_of_flight(tiny_redis):
    # Given a running worker, 50 jobs waiting in a paused queue, and Redis at maxmemory
    raw = tiny_redis.client()
    raw.sadd(keys.PAUSED, "default")
    raw.lpush("queue:default", *[json.dumps({"class": Noop.wire_name(), "args": [], "jid": f"{index:024x}"}) for index in range(50)])
    with WorkerProcess(["-c", "5"], redis_url=tiny_redis.url) as worker:
        inflight = keys.inflight(worker.identity)
        fill(tiny_redis)
        # When the queue is resumed (SREM frees memory, Redis allows it) and the worker runs them
        raw.srem(keys.PAUSED, "default")
        # Then every finished job leaves the in-flight list although Redis still refuses writes
        # (otherwise each would run again when the process restarts)
        wait_until(lambda: raw.llen("queue:default") == 0, timeout_seconds=20, message="the queue is drained")
        wait_until(lambda: raw.llen(inflight) == 0, timeout_seconds=20, message="no finished job is left in flight")
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            raw.set("probe", "x" * 1000)
        # and their counts, refused meanwhile, are added once Redis takes writes again
        raw.config_set("maxmemory", 0)
        wait_until(lambda: raw.get("stat:processed") == b"50", timeout_seconds=20, message="the 50 jobs are counted")
        output = worker.output
    assert "Traceback" not in output, output[-3000:]


def test_a_push_to_redis_that_cannot_save_raises_redis_unavailable(tiny_redis):
    # Given Redis whose last snapshot failed (its directory is gone) with stop-writes-on-bgsave-error
    raw = tiny_redis.client()
    raw.config_set("save", "3600 1")
    raw.config_set("stop-writes-on-bgsave-error", "yes")
    shutil.rmtree(tiny_redis.directory)
    raw.bgsave()
    deadline = time.monotonic() + 10
    while raw.info("persistence")["rdb_last_bgsave_status"] != "err" and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        # When a job is enqueued, Then RedisUnavailable says MISCONF
        with pytest.raises(RedisUnavailable, match="MISCONF"):
            Noop.perform_async()
    finally:
        raw.config_set("stop-writes-on-bgsave-error", "no")
        raw.config_set("save", "")
