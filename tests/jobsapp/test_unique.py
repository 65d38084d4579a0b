"""Unique jobs: the lock taken with the push (immediate, scheduled, bulk), racing pushers, and its
release at start or success, kept through retries."""

from __future__ import annotations

import json
import threading

import pytest

from jobsapp import keys
from jobsapp.connection import get_redis
from jobsapp.payload import decode
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from tests.testapp.jobs import RAN_KEY, Noop, UniqueRecord, UniqueUntilStart

INFLIGHT = keys.inflight("unique-test")


def unique_locks(redis) -> list[bytes]:
    return sorted(redis.scan_iter(match="jobsapp:unique:*"))


def run_next(redis, queue: str = "default"):
    """Take the next job of ``queue`` as a fetcher would, and run it in this thread."""
    raw = redis.lmove(f"queue:{queue}", INFLIGHT, "RIGHT", "LEFT")
    return Processor(RetryPolicy(get_redis(), INFLIGHT)).process(UnitOfWork(raw, queue)), decode(raw)


def test_racing_pushes_of_the_same_job_enqueue_exactly_one(redis):
    # Given 10 threads ready to push the same unique job 10 times each
    barrier = threading.Barrier(10)
    jids: list[str | None] = []
    lock = threading.Lock()

    def pushes():
        barrier.wait()
        mine = [UniqueRecord.perform_async("same") for _ in range(10)]
        with lock:
            jids.extend(mine)

    threads = [threading.Thread(target=pushes) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # When other arguments are pushed too
    other = UniqueRecord.perform_async("other")
    # Then exactly one of the 100 was enqueued, the 99 others returned None, and the other args enqueued
    enqueued = [jid for jid in jids if jid is not None]
    assert len(jids) == 100 and len(enqueued) == 1
    assert other is not None
    queued = [json.loads(raw) for raw in redis.lrange("queue:default", 0, -1)]
    assert sorted(job["jid"] for job in queued) == sorted([enqueued[0], other])
    assert len(unique_locks(redis)) == 2


def test_scheduled_and_bulk_pushes_take_the_lock_too(redis):
    # Given a unique job scheduled in a minute
    scheduled = UniqueRecord.perform_in(60, "later")
    # When the same job is pushed now, scheduled again, and in bulk with a new one and a repeat
    now = UniqueRecord.perform_async("later")
    again = UniqueRecord.perform_in(120, "later")
    bulk = UniqueRecord.perform_bulk([["later"], ["a"], ["a"], ["b"]])
    # Then only the first of each distinct job was written
    assert scheduled is not None and now is None and again is None
    assert bulk[0] is None and bulk[1] is not None and bulk[2] is None and bulk[3] is not None
    assert redis.zcard("schedule") == 1 and redis.llen("queue:default") == 2
    # and the scheduled job's lock lasts until a minute after it runs
    (lock_key,) = [key for key in unique_locks(redis) if redis.get(key).decode() == scheduled]
    assert 119_000 < redis.pttl(lock_key) <= 120_000


@pytest.mark.parametrize("options", [{"unique_for": 0}, {"unique_for": "60"}, {"unique_for": 60, "unique_until": "finish"}])
def test_bad_unique_options_are_refused_and_write_nothing(redis, options):
    # Given bad unique options, When a job is pushed with them, Then a clear error and no write
    with pytest.raises(ValueError, match="unique_"):
        Noop.set(**options).perform_async(1)
    assert redis.dbsize() == 0


def test_jobs_without_unique_for_carry_nothing_and_take_no_lock(redis):
    # Given a plain job pushed twice, one by one and in bulk
    first, second = Noop.perform_async(1), Noop.perform_async(1)
    Noop.perform_bulk([[1], [1]])
    # Then all four are queued and nothing of the unique machinery shows
    assert first and second and redis.llen("queue:default") == 4
    assert not unique_locks(redis)
    assert all("unique_digest" not in json.loads(raw) for raw in redis.lrange("queue:default", 0, -1))


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_the_lock_is_kept_through_retries_and_released_at_success(redis):
    # Given a unique job that fails once
    jid = UniqueRecord.perform_async("x", fail=True)
    # When it fails, then a new push of it is still refused while it waits for its retry
    result, item = run_next(redis)
    assert result.failed and redis.zcard("retry") == 1
    assert UniqueRecord.perform_async("x", fail=True) is None
    # When its retry succeeds (the same payload, now without the failure)
    redis.delete("retry")
    redis.lpush("queue:default", json.dumps({**item, "kwargs": {}}))
    result, _ = run_next(redis)
    # Then the lock is gone and the same job can be pushed again
    assert not result.failed and redis.lrange(RAN_KEY, 0, -1) == [b"x"]
    assert not unique_locks(redis)
    assert jid is not None and UniqueRecord.perform_async("x", fail=True) is not None


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_unique_until_start_releases_the_lock_before_perform(redis):
    # Given a job unique until start
    UniqueUntilStart.perform_async("s")
    # When a worker runs it
    run_next(redis)
    # Then its lock was already released while it ran, and it can be pushed again
    assert redis.lrange(RAN_KEY, 0, -1) == [b"s:held=0"]
    assert UniqueUntilStart.perform_async("s") is not None


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_a_release_never_frees_a_lock_another_push_holds(redis):
    # Given a unique job whose lock expired and was taken by a later push of the same job
    UniqueRecord.perform_async("y")
    (lock_key,) = unique_locks(redis)
    redis.set(lock_key, "f" * 24)
    # When the first job succeeds
    run_next(redis)
    # Then the later push's lock is still there
    assert redis.get(lock_key) == b"f" * 24


def test_the_cli_lists_and_releases_unique_locks(redis):
    from io import StringIO

    from django.core.management import call_command

    # Given a unique job pushed
    jid = UniqueRecord.perform_async("cli")
    # When the CLI lists the locks, then releases the one it found
    out = StringIO()
    call_command("jobs", "unique", "--json", stdout=out)
    (lock,) = json.loads(out.getvalue())
    call_command("jobs", "unique", "release", lock["digest"], stdout=StringIO())
    # Then the lock named the job holding it, and once released the same job can be pushed again
    assert lock["jid"] == jid and 59 < lock["expires_in_seconds"] <= 60
    assert UniqueRecord.perform_async("cli") is not None


@pytest.mark.parametrize(("retry", "lock_kept"), [(3, True), (False, False)])
def test_a_job_filed_at_the_hard_limit_keeps_its_lock_only_for_its_retry(redis, retry, lock_kept):
    # Given a unique job stuck past its timeout's hard limit (its process is about to stop)
    UniqueRecord.set(retry=retry).perform_async("stuck")
    raw = redis.lmove("queue:default", INFLIGHT, "RIGHT", "LEFT")
    # When the watchdog files it (retry set, or dead when it has no retries)
    Processor(RetryPolicy(get_redis(), INFLIGHT))._file_stuck(UnitOfWork(raw, "default"), decode(raw), UniqueRecord, 1.0)
    # Then a retry keeps the lock, as any failure does; a job done for good releases it
    assert (redis.zcard("retry") == 1) is lock_kept
    assert bool(unique_locks(redis)) is lock_kept
