"""Scenario 4: Redis paused, killed and restarted, and unreachable when the worker starts.

Each test gets a Redis server of its own with the append-only file fsynced on every write, so a
SIGKILLed server comes back with everything it acknowledged (the engine cannot do better than
its Redis; that durability is Redis's part). Workers must survive, back off (capped, logging once
per outage rather than once per attempt), resume within 10 s of Redis returning, and never
"recover" a live worker's jobs from under it. A producer gets ``RedisUnavailable``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from jobsapp import RedisUnavailable
from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import ATTEMPTS, DONE, LedgerJob
from tests.faults.ledger import check
from tests.redis_server import RedisServer
from tests.workers import ROOT_DIR, WorkerProcess, wait_until

pytestmark = pytest.mark.slow


class DurableRedisServer(RedisServer):
    """A throwaway server that keeps an append-only file fsynced on every write."""

    def start(self) -> DurableRedisServer:
        command = [
            self.executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.directory),
            "--logfile", str(self.directory / "redis.log"), "--maxmemory-policy", "noeviction",
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._answers, timeout_seconds=10, interval_seconds=0.02, message=f"redis-server on {self.port} answers")
        return self

    def _answers(self) -> bool:
        try:
            return bool(self.client(socket_timeout=1).ping())
        except Exception:
            return False


@pytest.fixture
def durable_redis(settings) -> Iterator[DurableRedisServer]:
    from jobsapp import connection

    server = DurableRedisServer().start()
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": server.url}
    connection.reset()
    yield server
    connection.reset()
    server.stop()


def progress(ledger) -> int:
    return int(sum(int(value) for value in ledger.hvals(ATTEMPTS)))


def resumed_within(ledger, *, timeout_seconds: float) -> float:
    """Seconds until a new job starts."""
    before = progress(ledger)
    started = time.monotonic()
    wait_until(lambda: progress(ledger) > before, timeout_seconds=timeout_seconds, message="work resumed")
    return time.monotonic() - started


def test_redis_paused_longer_than_the_heartbeat_ttl(durable_redis, ledger, start_worker, measure):
    redis = durable_redis.client()
    ids = [f"s4p-{index}" for index in range(300)]
    LedgerJob.perform_bulk([[ledger_id, 100] for ledger_id in ids])
    # Given two live workers busy with jobs
    workers = [start_worker(["-c", "5", "-t", "5"], overrides=FAST_LIVENESS, redis_url=durable_redis.url) for _ in range(2)]
    wait_until(lambda: ledger.hlen(ATTEMPTS) >= 30, timeout_seconds=20)
    # When Redis freezes for longer than the heartbeat TTL (3 s) but less than the socket timeout
    durable_redis.pause(5.0)
    resume_seconds = resumed_within(ledger, timeout_seconds=10)
    wait_until(lambda: ledger.hlen(DONE) == len(ids), timeout_seconds=60, message="every job finished")
    for worker in workers:
        worker.stop()
    # Then nothing was lost, and no live worker's jobs were "recovered" from under it
    report = check(redis, ledger, ids)
    recovered = sum("recovered in-flight jobs" in worker.output for worker in workers)
    measure("4 Redis paused 5 s", lost=len(report.lost), duplicates=report.duplicates, resume_seconds=resume_seconds,
            live_jobs_recovered=recovered)  # fmt: skip
    report.assert_clean()
    assert resume_seconds < 10
    assert recovered == 0, "a live worker's in-flight jobs were recovered after the pause"
    assert report.duplicates == 0


def test_redis_killed_and_restarted_under_load(durable_redis, ledger, start_worker, measure):
    redis = durable_redis.client()
    ids = [f"s4k-{index}" for index in range(600)]
    LedgerJob.perform_bulk([[ledger_id, 20] for ledger_id in ids])
    worker = start_worker(["-P", "2", "-c", "5", "-t", "5"], overrides=FAST_LIVENESS, redis_url=durable_redis.url)
    wait_until(lambda: ledger.hlen(ATTEMPTS) >= 50, timeout_seconds=20)
    # When Redis is SIGKILLed, stays down 4 s, and comes back from its append-only file
    durable_redis.kill()
    time.sleep(4.0)
    durable_redis.start()
    resume_seconds = resumed_within(ledger, timeout_seconds=15)
    wait_until(lambda: ledger.hlen(DONE) == len(ids), timeout_seconds=60, message="every job finished")
    assert worker.process is not None and worker.process.poll() is None, "the worker died with Redis"
    worker.stop()
    report = check(redis, ledger, ids)
    outage_warnings = worker.output.count("Redis unavailable")
    measure("4 Redis killed 4 s", lost=len(report.lost), duplicates=report.duplicates, resume_seconds=resume_seconds,
            outage_warnings=outage_warnings)  # fmt: skip
    report.assert_clean()
    assert resume_seconds < 10
    # capped backoff, one warning per thread per outage: not a line per attempt
    assert outage_warnings < 40, worker.output[-3000:]


def test_worker_started_while_redis_is_unreachable_waits_then_works(ledger, measure):
    server = DurableRedisServer()
    env = {"DJANGO_SETTINGS_MODULE": "tests.faults.settings", "REDIS_URL": server.url, "PYTHONUNBUFFERED": "1"}
    worker = WorkerProcess(["-c", "2"], env, redis_url=server.url)
    # Given a worker started while nothing listens on its Redis port
    worker.process = subprocess.Popen(
        [sys.executable, "manage.py", "runworkers", "-c", "2", "-t", "2"],
        cwd=ROOT_DIR, env=worker.env, stdout=worker._log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(lambda: "waiting for Redis" in worker.output, timeout_seconds=20, message="it says it waits")
        time.sleep(2.0)
        assert worker.process.poll() is None, worker.output
        # When Redis comes up
        server.start()
        redis = server.client()
        came_up = time.monotonic()
        wait_until(lambda: redis.scard("processes") == 1, timeout_seconds=10, message="the worker registered")
        registered_seconds = time.monotonic() - came_up
        # Then it works
        redis.lpush("queue:default", b'{"class":"tests.faults.jobs.LedgerJob","args":["s4u"],"jid":"0123456789abcdef01234567"}')
        wait_until(lambda: ledger.hget(DONE, "s4u"), timeout_seconds=10, message="the job ran")
        measure("4 Redis down at start", registered_seconds=registered_seconds)
        assert registered_seconds < 10
        assert worker.output.count("waiting for Redis") == 1
    finally:
        worker._kill_group()
        server.stop()


def test_enqueue_while_redis_is_down_raises_redis_unavailable(durable_redis):
    durable_redis.kill()
    started = time.monotonic()
    with pytest.raises(RedisUnavailable, match=r"Redis is unavailable at redis://127\.0\.0\.1:\d+/0"):
        LedgerJob.perform_async("s4-down")
    with pytest.raises(RedisUnavailable):
        LedgerJob.perform_bulk([["s4-down-1"], ["s4-down-2"]])
    assert time.monotonic() - started < 12
