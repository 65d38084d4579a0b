"""Redis-only batches: callbacks fire once every job has run (complete) or succeeded (success),
never while jobs are still being added, exactly once with racing workers."""

from __future__ import annotations

import json

import pytest

from jobsapp import keys
from jobsapp.batch import BATCH_LINGER_SECONDS, Batch, BatchCompleted, job_finished
from jobsapp.connection import get_redis
from jobsapp.payload import decode
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from tests.testapp.jobs import BatchComplete, BatchMember, BatchSuccess, Noop, UniqueRecord
from tests.workers import WorkerProcess, wait_until

INFLIGHT = keys.inflight("batch-test")


def run_next(redis, queue: str = "default"):
    raw = redis.lmove(f"queue:{queue}", INFLIGHT, "RIGHT", "LEFT")
    return Processor(RetryPolicy(get_redis(), INFLIGHT)).process(UnitOfWork(raw, queue)), decode(raw)


def callbacks(redis) -> list[tuple[str, list]]:
    return [(item["class"], item["args"]) for item in map(json.loads, reversed(redis.lrange("queue:callbacks", 0, -1)))]


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_callbacks_fire_once_after_every_job_ran_and_not_while_jobs_are_added(redis):
    # Given a batch of three jobs, the first of which runs while the block is still adding jobs
    batch = Batch(on_complete=BatchComplete, on_success=BatchSuccess, description="three")
    with batch.jobs():
        BatchMember.perform_async("a")
        run_next(redis)
        BatchMember.perform_bulk([["b"], ["c"]])
        assert callbacks(redis) == []
    # When the other two run
    run_next(redis)
    assert callbacks(redis) == []
    run_next(redis)
    # Then both callbacks were pushed once, with the batch id and its counts
    counts = {"total": 3, "succeeded": 3, "failed": 0}
    assert callbacks(redis) == [(BatchComplete.wire_name(), [batch.bid, counts]), (BatchSuccess.wire_name(), [batch.bid, counts])]
    status = batch.status()
    assert status is not None and status.complete and status.success and status.description == "three"


@pytest.mark.django_db
def test_a_failure_completes_the_batch_and_success_waits_for_the_retry(redis):
    # Given a batch of two jobs, one failing on its first run
    batch = Batch(on_complete=BatchComplete, on_success=BatchSuccess)
    with batch.jobs():
        BatchMember.perform_async("ok")
        BatchMember.perform_async("flaky", fail=True)
    run_next(redis)
    _, failing = run_next(redis)
    # Then complete fired (every job ran once), success did not
    assert callbacks(redis) == [(BatchComplete.wire_name(), [batch.bid, {"total": 2, "succeeded": 1, "failed": 1}])]
    # When the retry of the failed job succeeds
    redis.delete("retry", "queue:callbacks")
    redis.lpush("queue:default", json.dumps({**failing, "kwargs": {}}))
    run_next(redis)
    # Then success fires, once
    assert callbacks(redis) == [(BatchSuccess.wire_name(), [batch.bid, {"total": 2, "succeeded": 2, "failed": 0}])]


@pytest.mark.django_db
def test_a_callback_class_without_a_queue_goes_to_the_default_queue_setting(redis, settings):
    # Given DEFAULT_QUEUE set to "fallback", and a batch whose callback class names no queue
    settings.JOBSAPP = {**settings.JOBSAPP, "DEFAULT_QUEUE": "fallback"}
    batch = Batch(on_complete=Noop)
    with batch.jobs():
        BatchMember.perform_async("a")
    # When its job runs
    run_next(redis, "fallback")
    # Then the callback was pushed to DEFAULT_QUEUE (not "default")
    (pushed,) = [json.loads(raw) for raw in redis.lrange("queue:fallback", 0, -1)]
    assert (pushed["class"], pushed["args"][0]) == (Noop.wire_name(), batch.bid)
    assert redis.llen("queue:default") == 0


def test_a_refused_unique_push_is_not_waited_for_and_plain_jobs_carry_no_batch(redis):
    # Given a unique job already pushed, then pushed again inside a batch with another job
    UniqueRecord.perform_async("held")
    batch = Batch(on_complete=BatchComplete)
    with batch.jobs():
        refused = UniqueRecord.perform_async("held")
        Noop.perform_async(1)
    # Then the refused push is not counted in the batch; jobs outside a batch carry no "bid"
    status = batch.status()
    assert refused is None and status is not None and (status.total, status.pending) == (1, 1)
    outside, inside = (json.loads(raw) for raw in redis.lrange("queue:default", 0, -1)[::-1])
    assert "bid" not in outside and inside["bid"] == batch.bid


@pytest.mark.slow
def test_racing_workers_fire_each_callback_exactly_once(redis_server, redis):
    # Given a batch of 60 jobs run by three worker processes of 6 threads each
    batch = Batch(on_complete=BatchComplete, on_success=BatchSuccess)
    with batch.jobs():
        BatchMember.perform_bulk([[index] for index in range(60)])
    with WorkerProcess(["-P", "3", "-c", "6", "-q", "default", "-q", "callbacks"], redis_url=redis_server.url):
        # When they run every job and the callbacks
        wait_until(lambda: redis.llen("test:batch_callbacks") >= 2, timeout_seconds=60, message="both callbacks ran")
        wait_until(lambda: redis.llen("queue:callbacks") == 0 and redis.llen("queue:default") == 0, message="queues drained")
    # Then each callback ran exactly once
    ran = sorted(json.loads(value) for value in redis.lrange("test:batch_callbacks", 0, -1))
    counts = {"failed": 0, "succeeded": 60, "total": 60}
    assert ran == [["complete", batch.bid, counts], ["success", batch.bid, counts]]


def test_the_cli_shows_a_batch(redis):
    from io import StringIO

    from django.core.management import CommandError, call_command

    batch = Batch(description="cli")
    with batch.jobs():
        Noop.perform_bulk([[1], [2]])
    out = StringIO()
    call_command("jobs", "batch", batch.bid, "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert (shown["total"], shown["pending"], shown["complete"], shown["description"]) == (2, 2, False, "cli")
    with pytest.raises(CommandError, match="no batch"):
        call_command("jobs", "batch", "0" * 16, stdout=StringIO())


def test_a_batch_without_redis_raises_the_documented_error(settings):
    from jobsapp import RedisUnavailable, connection
    from tests.redis_server import free_port

    # Given Redis down, When a batch's block is entered, Then RedisUnavailable and nothing runs in it
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    connection.reset()
    entered = []
    with pytest.raises(RedisUnavailable, match="Redis is unavailable"), Batch().jobs():
        entered.append(True)
    assert entered == []


def test_each_job_counts_once_however_often_its_outcome_is_reported(redis):
    # Given a batch of three jobs, all pushed
    batch = Batch(on_complete=BatchComplete, on_success=BatchSuccess)
    with batch.jobs():
        jids = [BatchMember.perform_async(name) for name in ("a", "b", "c")]
    items = [{"jid": jid, "bid": batch.bid} for jid in jids]
    # When "a" succeeds twice (it ran again after a crash before its ack), "b" fails twice and
    # then succeeds, and "c" succeeds and then a re-run of it fails
    job_finished(get_redis(), items[0], succeeded=True)
    job_finished(get_redis(), items[0], succeeded=True)
    job_finished(get_redis(), items[1], succeeded=False)
    job_finished(get_redis(), items[1], succeeded=False)
    assert callbacks(redis) == []  # "c" has not run: nothing may fire
    job_finished(get_redis(), items[1], succeeded=True)
    job_finished(get_redis(), items[2], succeeded=True)
    job_finished(get_redis(), items[2], succeeded=False)
    # Then each job counted once, nothing is pending, and each callback fired once with those counts
    status = batch.status()
    assert status is not None and (status.total, status.succeeded, status.failed, status.pending) == (3, 3, 0, 0)
    counts = {"total": 3, "succeeded": 3, "failed": 0}
    assert callbacks(redis) == [(BatchComplete.wire_name(), [batch.bid, counts]), (BatchSuccess.wire_name(), [batch.bid, counts])]


def batch_keys(bid: str) -> tuple[str, str, str]:
    return f"jobsapp:batch:{bid}", f"jobsapp:batch:{bid}:succeeded", f"jobsapp:batch:{bid}:failed"


def test_a_batch_that_succeeded_keeps_only_its_hash_for_a_day_and_still_counts_each_job_once(redis):
    # Given a batch of three jobs, all of which succeeded
    batch = Batch(on_complete=BatchComplete, on_success=BatchSuccess)
    with batch.jobs():
        jids = [BatchMember.perform_async(name) for name in ("a", "b", "c")]
    items = [{"jid": jid, "bid": batch.bid} for jid in jids]
    for item in items:
        job_finished(get_redis(), item, succeeded=True)
    hash_key, succeeded_key, failed_key = batch_keys(batch.bid)
    # Then its jid sets are gone and its hash lives a day at most, no longer 30 days
    assert redis.exists(succeeded_key, failed_key) == 0
    assert 0 < redis.ttl(hash_key) <= BATCH_LINGER_SECONDS
    # When, within that day, every job is reported again (success and failure: runs after a crash)
    for item in items:
        job_finished(get_redis(), item, succeeded=True)
        job_finished(get_redis(), item, succeeded=False)
    # Then nothing was counted twice, no callback fired again, and the day was not extended
    status = batch.status()
    assert status is not None and (status.total, status.succeeded, status.failed, status.pending) == (3, 3, 0, 0)
    assert [name for name, _ in callbacks(redis)] == [BatchComplete.wire_name(), BatchSuccess.wire_name()]
    assert redis.exists(succeeded_key, failed_key) == 0 and 0 < redis.ttl(hash_key) <= BATCH_LINGER_SECONDS
    # When the day has passed (the hash expired) and a late duplicate arrives
    redis.delete(hash_key)
    job_finished(get_redis(), items[0], succeeded=True)
    job_finished(get_redis(), items[1], succeeded=False)
    # Then it finds no batch and writes nothing
    assert redis.exists(*batch_keys(batch.bid)) == 0 and len(callbacks(redis)) == 2


def test_a_batch_with_failures_drops_its_succeeded_set_and_waits_for_the_retries(redis):
    # Given a batch of three jobs: "a" and "b" succeeded, "c" failed (waiting for its retry)
    batch = Batch(on_complete=BatchComplete, on_success=BatchSuccess)
    with batch.jobs():
        jids = [BatchMember.perform_async(name) for name in ("a", "b", "c")]
    a, b, c = ({"jid": jid, "bid": batch.bid} for jid in jids)
    job_finished(get_redis(), a, succeeded=True)
    job_finished(get_redis(), b, succeeded=True)
    job_finished(get_redis(), c, succeeded=False)
    hash_key, succeeded_key, failed_key = batch_keys(batch.bid)
    # Then on_complete fired, the succeeded set is gone, and the hash and failed set keep 30 days
    assert [name for name, _ in callbacks(redis)] == [BatchComplete.wire_name()]
    assert redis.exists(succeeded_key) == 0 and redis.smembers(failed_key) == {jids[2].encode()}
    assert redis.ttl(hash_key) > BATCH_LINGER_SECONDS and redis.ttl(failed_key) > BATCH_LINGER_SECONDS
    # When "a" is reported again (a success and a failure) and "c" fails again
    job_finished(get_redis(), a, succeeded=True)
    job_finished(get_redis(), a, succeeded=False)
    job_finished(get_redis(), c, succeeded=False)
    status = batch.status()
    assert status is not None and (status.succeeded, status.failed, status.pending) == (2, 1, 0)
    # When "c" succeeds on its retry, then again (a duplicate)
    job_finished(get_redis(), c, succeeded=True)
    job_finished(get_redis(), c, succeeded=True)
    # Then it counts once, on_success fires once, and the batch lingers a day
    status = batch.status()
    assert status is not None and (status.total, status.succeeded, status.failed, status.pending) == (3, 3, 0, 0)
    assert [name for name, _ in callbacks(redis)] == [BatchComplete.wire_name(), BatchSuccess.wire_name()]
    assert redis.exists(succeeded_key, failed_key) == 0 and 0 < redis.ttl(hash_key) <= BATCH_LINGER_SECONDS


def test_a_completed_batch_cannot_be_reopened(redis):
    # Given a batch whose only job ran (its callback fired)
    batch = Batch(on_complete=BatchComplete)
    with batch.jobs():
        jid = BatchMember.perform_async("a")
    job_finished(get_redis(), {"jid": jid, "bid": batch.bid}, succeeded=True)
    # When a block is entered again to add a job
    added = []
    with pytest.raises(BatchCompleted, match="completed"), batch.jobs():
        added.append(BatchMember.perform_async("late"))
    # Then nothing was added, nothing is pending, the callback did not fire again, the day stands
    status = batch.status()
    assert added == [] and status is not None and (status.total, status.pending) == (1, 0)
    assert len(callbacks(redis)) == 1 and 0 < redis.ttl(batch_keys(batch.bid)[0]) <= BATCH_LINGER_SECONDS


@pytest.mark.django_db
def test_a_routed_success_waits_for_its_sink_and_is_counted_once_with_the_others(redis):
    from jobsapp import batch as batches

    # Given a batch of three jobs, run by a thread that routes its successes (as a worker's
    # processor threads hand them to the acker), one of them failing first
    batch = Batch(on_complete=BatchComplete, on_success=BatchSuccess)
    with batch.jobs():
        BatchMember.perform_bulk([["a"], ["b"]])
        BatchMember.perform_async("flaky", fail=True)
    handed: list[tuple[str, str]] = []
    batches.route_successes(lambda client, bid, jid: handed.append((bid, jid)))
    try:
        _, first = run_next(redis)
        _, second = run_next(redis)
        run_next(redis)  # fails: counted at once, its filing took it out of flight
    finally:
        batches.route_successes(None)
    # Then the successes were not counted by the jobs' thread, the failure was
    assert [jid for _, jid in handed] == [first["jid"], second["jid"]]
    status = batch.status()
    assert status is not None and (status.pending, status.succeeded, status.failed) == (2, 0, 1)
    assert callbacks(redis) == []
    # When the sink counts them, one of them reported twice (a re-run after a crash)
    batches.count_successes(get_redis(), [*handed, handed[0]])
    # Then each is counted once, in one call, and on_complete fired once: every job has run
    status = batch.status()
    assert status is not None and (status.pending, status.succeeded, status.failed, status.complete) == (0, 2, 1, True)
    assert [name for name, _ in callbacks(redis)] == [BatchComplete.wire_name()]
