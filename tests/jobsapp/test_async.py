"""Async jobs (``async def perform``): awaited on each worker process's event loop (jobsapp.worker.aio).

The end-to-end tests run a real ``runworkers`` process against the test Redis; the others run
jobs in this process.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time

import pytest

from jobsapp import Job, JobTimeout, job, keys, results, testing
from jobsapp.celery import shared_task
from jobsapp.connection import get_redis
from jobsapp.error_fields import decompress_backtrace
from jobsapp.worker import aio
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from tests.testapp.jobs import (
    RAN_KEY,
    AsyncBlockingCall,
    AsyncExplode,
    AsyncNap,
    AsyncOrmCount,
    AsyncSyncToAsync,
    Noop,
    Record,
    Sleep,
    TrackedAsync,
)
from tests.testapp.tasks import async_multiply, celery_async_add
from tests.workers import WorkerProcess, wait_until, worker_database_url

FAST_BEAT = {"JOBSAPP_TEST_OVERRIDES": json.dumps({"HEARTBEAT_INTERVAL_SECONDS": 0.2})}
CHAIN = {"JOBSAPP_TEST_OVERRIDES": json.dumps({"SERVER_MIDDLEWARE": ["tests.testapp.jobs.RecordsChain"]})}


def ran(redis) -> list[str]:
    return [value.decode() for value in redis.lrange(RAN_KEY, 0, -1)]


# --- declaring --------------------------------------------------------------------------


def test_a_job_whose_perform_is_async_def_is_an_async_job():
    # Given job classes with a sync and an async perform, Then only the async one is async
    assert AsyncNap.is_async and not Noop.is_async

    # And a subclass inherits its parent's async perform
    class Child(AsyncNap):
        pass

    assert Child.is_async


def test_an_async_generator_perform_is_refused_when_the_class_is_defined():
    # When a job class's perform is an async generator, Then defining it fails with the reason
    with pytest.raises(TypeError, match="async generator"):

        class Streams(Job):
            async def perform(self):
                yield 1


def test_async_function_jobs_and_tasks_are_async_jobs():
    # Given an async function job and an async Celery-style task, Then both run as async jobs
    assert async_multiply.job_class.is_async and celery_async_add.job_class.is_async
    # And what the workers cannot run right is refused where it is defined, with the reason
    with pytest.raises(TypeError, match="async generator"):

        @job
        async def streams():
            yield 1

    with pytest.raises(TypeError, match="bind=True is not supported on an async def task"):

        @shared_task(bind=True, name="tests.bound")
        async def bound(self):
            return None


@pytest.mark.parametrize("value", ["0", "10001"])
def test_an_absurd_async_concurrency_is_refused_with_the_limit(value):
    # When runworkers is given an async lane of 0 or past the limit, Then it refuses before starting
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--async-concurrency must be between 1 and 10000"):
        call_command("runworkers", "--async-concurrency", value)


# --- in this process ----------------------------------------------------------------------


def test_inline_mode_awaits_an_async_job(redis):
    # Given inline mode, When an async job is pushed, Then it ran to the end (not a lost coroutine)
    testing.set_mode("inline")
    AsyncNap.perform_async(0.01, "inline")
    assert ran(redis) == ["inline"]


def test_a_timeout_cancels_the_coroutine_and_raises_job_timeout():
    # Given a coroutine that outlives its timeout
    cancelled = []

    async def slow():
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    started = time.monotonic()
    with pytest.raises(JobTimeout, match=r"timeout of 0\.05 s"):
        aio.run(slow(), timeout_seconds=0.05)
    # Then it was cancelled at the timeout, not awaited to its end
    assert cancelled == [True] and time.monotonic() - started < 2

    # And a TimeoutError the job raises itself stays what it is
    async def raises_its_own():
        raise TimeoutError("upstream")

    with pytest.raises(TimeoutError, match="upstream"):
        aio.run(raises_its_own(), timeout_seconds=5)


def test_a_coroutine_that_blocks_its_loop_past_the_timeout_fails_with_job_timeout():
    # Given a coroutine that blocks the loop (time.sleep in async def) past its timeout, then returns
    async def blocks():
        time.sleep(0.3)
        return "done"

    # When it runs under a 0.05 s timeout, Then it fails with JobTimeout, its value not kept
    with pytest.raises(JobTimeout, match="blocking its event loop"):
        aio.run(blocks(), timeout_seconds=0.05)
    # And one that returns within its timeout keeps its value
    assert aio.run(blocks(), timeout_seconds=5) == "done"


class BlocksItsLoop(Job):
    async def perform(self, seconds):
        time.sleep(seconds)
        return "done"


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_an_async_job_that_blocked_past_its_timeout_is_filed_as_a_failure_not_a_success(redis):
    # Given an async job that blocks its loop 0.3 s with a 0.05 s timeout, fetched by a processor
    BlocksItsLoop.set(timeout=0.05, retry=3).perform_async(0.3)
    inflight = keys.inflight("async-test")
    raw = redis.lmove("queue:default", inflight, "RIGHT", "LEFT")
    # When the processor runs it
    outcome = Processor(RetryPolicy(get_redis(), inflight)).process(UnitOfWork(raw, "default"))
    # Then it is a failure, in the retry set with JobTimeout, not acknowledged as done
    assert outcome is not None and outcome.failed and not outcome.acknowledge
    (retried,) = redis.zrange("retry", 0, -1)
    assert json.loads(retried)["error_class"] == "jobsapp.errors.JobTimeout"


# --- a real worker process ------------------------------------------------------------------

slow = pytest.mark.slow


@slow
@pytest.mark.parametrize("fetch", ["reliable", "basic"])
def test_fifty_async_jobs_sleeping_one_second_finish_in_under_three_seconds_with_five_threads(redis_server, redis, fetch):
    # Given 50 async jobs that each await a 1 s sleep
    AsyncNap.perform_bulk([[1.0, str(index)] for index in range(50)])
    # When one worker process with 5 threads runs them
    with WorkerProcess(["-c", "5", "--fetch", fetch], redis_url=redis_server.url):
        started = time.monotonic()
        wait_until(lambda: redis.llen(RAN_KEY) == 50, timeout_seconds=20, message="all 50 ran")
        seconds = time.monotonic() - started
        wait_until(lambda: redis.get("stat:processed") == b"50", message="acknowledged and counted")
    # Then they ran together on the loop, not 5 at a time (that would take 10 s)
    assert seconds < 3.0, f"50 async jobs of 1 s took {seconds:.1f} s"
    assert sorted(ran(redis), key=int) == [str(index) for index in range(50)]
    assert redis.llen("queue:default") == 0 and redis.zcard("retry") == 0


@slow
def test_async_concurrency_caps_the_jobs_awaiting_at_once(redis_server, redis):
    # Given 6 async jobs of 1 s and an async lane of 2
    AsyncNap.perform_bulk([[1.0, str(index)] for index in range(6)])
    with WorkerProcess(["-c", "5", "--async-concurrency", "2"], redis_url=redis_server.url) as worker:
        started = time.monotonic()
        wait_until(lambda: redis.llen(RAN_KEY) == 6, timeout_seconds=20, message="all 6 ran")
        seconds = time.monotonic() - started
        assert worker.info()["async_concurrency"] == 2
    # Then they ran 2 at a time: three rounds of 1 s
    assert 2.8 <= seconds < 6, f"6 async jobs of 1 s, 2 at once, took {seconds:.1f} s"


@slow
@pytest.mark.parametrize("fetch", ["reliable", "basic"])
def test_a_full_lane_takes_no_more_jobs_though_threads_are_idle(redis_server, redis, fetch):
    # Given a process with two threads and an async lane of one, and three long async jobs
    AsyncNap.perform_bulk([[30.0, str(index)] for index in range(3)])
    worker = WorkerProcess(["-c", "2", "--async-concurrency", "1", "-t", "0", "--fetch", fetch], redis_url=redis_server.url).start()
    # Then one runs and the other two stay in Redis's queue for a process with a free slot
    wait_until(lambda: redis.llen("test:started") == 1, message="the first started")
    time.sleep(1.0)
    assert redis.llen("queue:default") == 2
    if fetch == "reliable":
        assert redis.llen(f"jobsapp:inflight:{worker.identity}") == 1
    # And when it stops, the running one is cancelled and put back with them
    worker.stop()
    assert redis.llen("queue:default") == 3 and redis.llen("test:started") == 1
    assert [value.decode() for value in redis.lrange("test:cancelled", 0, -1)] == ["0"]


@slow
def test_forked_processes_share_long_async_jobs_and_hold_no_more_than_their_lanes_start(redis_server, redis):
    # Given runworkers -P 2 -c 5 with async lanes of 2, idle
    with WorkerProcess(["-P", "2", "-c", "5", "--async-concurrency", "2"], redis_url=redis_server.url) as worker:
        # When 8 async jobs of 2 s arrive at once
        started = time.monotonic()
        AsyncNap.perform_bulk([[2.0, str(index)] for index in range(8)])
        most_held = 0
        while redis.llen(RAN_KEY) < 8:
            assert time.monotonic() - started < 30, f"only {redis.llen(RAN_KEY)} of 8 ran in 30 s"
            for identity in worker.identities:
                most_held = max(most_held, redis.llen(f"jobsapp:inflight:{identity}"))
            time.sleep(0.02)
        seconds = time.monotonic() - started
    # Then no process held more than its lane runs (plus finished jobs waiting for their batched
    # ack), and the 4 slots ran them in two rounds (a process taking 5 of them needs three)
    assert most_held <= 4
    assert seconds < 5.5, f"8 async jobs of 2 s on 2 lanes of 2 took {seconds:.1f} s: a process hoarded jobs"


@slow
def test_an_async_failure_goes_to_retry_with_the_error_as_a_sync_one(redis_server, redis):
    # Given an async job that raises
    jid = AsyncExplode.perform_async("async kaput")
    with WorkerProcess(["-c", "2"], redis_url=redis_server.url):
        wait_until(lambda: redis.zcard("retry") == 1, message="the job is in the retry set")
        wait_until(lambda: redis.get("stat:failed") == b"1", message="counted failed")
    # Then it is filed with Sidekiq's fields and the coroutine's own backtrace
    (member,) = redis.zrange("retry", 0, -1)
    item = json.loads(member)
    assert item["jid"] == jid and item["retry_count"] == 0
    assert item["error_class"] == "ValueError" and item["error_message"] == "async kaput"
    assert any("in `perform'" in line for line in decompress_backtrace(item["error_backtrace"]))


@slow
def test_a_timeout_fails_an_async_job_with_job_timeout(redis_server, redis):
    # Given an async job pushed with a timeout shorter than its sleep
    AsyncNap.set(timeout=0.5, retry=1).perform_async(30, "too slow")
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url):
        wait_until(lambda: redis.zcard("retry") == 1, message="the job is in the retry set")
    # Then it was cancelled and failed with JobTimeout
    (member,) = redis.zrange("retry", 0, -1)
    assert json.loads(member)["error_class"] == "jobsapp.errors.JobTimeout"
    assert [value.decode() for value in redis.lrange("test:cancelled", 0, -1)] == ["too slow"]


@slow
def test_server_middleware_wraps_async_jobs_and_sees_their_exceptions(redis_server, redis):
    # Given a server middleware that records what it wraps, When async jobs run (one fails)
    AsyncNap.perform_async(0.01, "fine")
    AsyncExplode.perform_async("seen")
    with WorkerProcess(["-c", "2"], redis_url=redis_server.url, env=CHAIN):
        wait_until(lambda: redis.llen("test:chain") == 2, message="the chain ran twice")
    seen = sorted((json.loads(raw) for raw in redis.lrange("test:chain", 0, -1)), key=lambda entry: entry["class"])
    # Then it wrapped both, in a lane thread (not a processor thread, never the loop), and saw the error
    assert [entry["class"] for entry in seen] == [AsyncExplode.wire_name(), AsyncNap.wire_name()]
    assert all(entry["thread"].startswith("jobsapp.async-") for entry in seen)
    assert seen[0]["raised"] == "ValueError" and "raised" not in seen[1]


@slow
def test_thread_sensitive_sync_calls_of_an_async_job_run_in_its_own_lane_thread(redis_server, redis):
    # Given an async job that calls sync code through sync_to_async (as Django's async ORM does)
    AsyncSyncToAsync.perform_async("x")
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url):
        wait_until(lambda: redis.llen("test:threads") == 1, message="the job ran")
    _value, loop_thread, sync_thread = json.loads(redis.lindex("test:threads", 0))
    # Then the coroutine ran on the loop and the sync call in the job's lane thread
    assert loop_thread == "jobsapp.event-loop" and sync_thread.startswith("jobsapp.async-")


@slow
def test_running_async_jobs_are_in_the_busy_set_and_count_as_busy(redis_server, redis):
    # Given 8 async jobs awaiting 3 s on a process with 2 threads
    AsyncNap.perform_bulk([[3.0, str(index)] for index in range(8)])
    with WorkerProcess(["-c", "2"], redis_url=redis_server.url, env=FAST_BEAT) as worker:
        # Then while they run, each has its own entry in <identity>:work (and :workers), and busy says 8
        wait_until(lambda: redis.hlen(f"{worker.identity}:work") == 8, timeout_seconds=5, message="8 entries in the busy set")
        entries = [json.loads(raw) for raw in redis.hvals(f"{worker.identity}:work")]
        assert {json.loads(entry["payload"])["class"] for entry in entries} == {AsyncNap.wire_name()}
        assert redis.hlen(f"{worker.identity}:workers") == 8
        assert redis.hget(worker.identity, "busy") == b"8"
        wait_until(lambda: redis.llen(RAN_KEY) == 8, timeout_seconds=10, message="all ran")
        wait_until(lambda: redis.hlen(f"{worker.identity}:work") == 0, timeout_seconds=5, message="the busy set emptied")


@slow
def test_term_cancels_async_jobs_at_the_deadline_and_puts_them_back_at_the_front(redis_server, redis):
    # Given 3 async jobs that outlive the shutdown timeout, and a job still queued behind them
    AsyncNap.perform_bulk([[30.0, str(index)] for index in range(3)])
    worker = WorkerProcess(["-c", "1", "-t", "1"], redis_url=redis_server.url).start()
    wait_until(lambda: redis.llen("test:started") == 3, message="the async jobs started")
    # When the process is told to stop
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < 8
    # Then each coroutine was cancelled (its clean-up ran), and the jobs are back on their queue,
    # not in retry, and no longer in flight
    assert sorted(value.decode() for value in redis.lrange("test:cancelled", 0, -1)) == ["0", "1", "2"]
    queued = [json.loads(raw) for raw in redis.lrange("queue:default", 0, -1)]
    assert sorted(item["args"][1] for item in queued) == ["0", "1", "2"]
    assert redis.zcard("retry") == 0 and redis.zcard("dead") == 0
    assert redis.llen(f"jobsapp:inflight:{worker.identity}") == 0
    assert ran(redis) == []


@slow
def test_a_job_awaiting_a_blocking_call_in_a_thread_does_not_hold_the_process_at_shutdown(redis_server, redis):
    # Given an async job awaiting asyncio.to_thread(time.sleep, 30)
    AsyncBlockingCall.perform_async(30, "blocked")
    worker = WorkerProcess(["-c", "1", "-t", "1"], redis_url=redis_server.url).start()
    wait_until(lambda: redis.llen("test:started") == 1, message="the job started")
    # When the process is told to stop, Then it exits soon after the deadline and the job is back
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < 8
    assert redis.llen("queue:default") == 1 and redis.zcard("retry") == 0


@slow
def test_ttin_logs_where_each_async_job_awaits(redis_server, redis):
    # Given an async job awaiting a long sleep
    AsyncNap.perform_async(30, "napping")
    with WorkerProcess(["-c", "1", "-t", "0"], redis_url=redis_server.url) as worker:
        wait_until(lambda: redis.llen("test:started") == 1, message="the job started")
        # When the process gets TTIN, Then its log shows the job's await chain down to the sleep
        worker.signal(signal.SIGTTIN)
        wait_until(lambda: "async job awaiting" in worker.output, message="the await chains logged")
        chain = worker.output.split("async job awaiting:", 1)[1]
        assert "testapp/jobs.py" in chain and "in perform" in chain and "in sleep" in chain


@slow
def test_sigkill_during_async_jobs_loses_nothing(redis_server, redis):
    # Given async jobs running when the process is killed
    AsyncNap.perform_bulk([[30.0, str(index)] for index in range(4)])
    worker = WorkerProcess(["-c", "1"], redis_url=redis_server.url).start()
    wait_until(lambda: redis.llen("test:started") == 4, message="the async jobs started")
    worker.kill()
    # Then they are all still in the process's in-flight list (recovered by the next process)
    assert redis.llen(f"jobsapp:inflight:{worker.identity}") == 4


@slow
def test_async_function_jobs_and_celery_tasks_run_on_the_loop(redis_server, redis):
    # Given an async function job (retained) and an async Celery-style task
    jid = async_multiply.perform_async(6, 7)
    result = celery_async_add.delay(40, 2)
    # When a worker runs them, Then their coroutines ran to the end and returned their values
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url):
        wait_until(lambda: (record := results.get(jid)) is not None and record.status == results.SUCCEEDED, message="retained")
        assert result.get(timeout=10) == 42
    assert results.get(jid).value == 42


@slow
def test_sync_and_async_jobs_share_a_process(redis_server, redis):
    # Given sync jobs that hold a thread and async jobs that await, mixed on one queue
    for index in range(4):
        Sleep.perform_async(1.0, f"sync-{index}")
        AsyncNap.perform_async(1.0, f"async-{index}")
    Record.perform_bulk([[f"quick-{index}"] for index in range(10)])
    # When a process with 2 threads runs them
    with WorkerProcess(["-c", "2"], redis_url=redis_server.url):
        wait_until(lambda: redis.llen(RAN_KEY) == 18, timeout_seconds=20, message="all 18 ran")
        wait_until(lambda: redis.get("stat:processed") == b"18", message="all counted")
    # Then every job ran once
    assert sorted(ran(redis)) == sorted(
        [f"sync-{index}" for index in range(4)] + [f"async-{index}" for index in range(4)] + [f"quick-{index}" for index in range(10)]
    )


@slow
@pytest.mark.django_db(transaction=True)
def test_a_tracked_async_job_records_its_attempt_and_finish(redis_server, redis, settings):
    from jobsapp import middleware
    from tracking.models import Event

    # Given a tracked async job pushed through the tracking client middleware
    tracking = {
        "CLIENT_MIDDLEWARE": ["tracking.middleware.TrackingClientMiddleware"],
        "SERVER_MIDDLEWARE": ["tracking.middleware.TrackingServerMiddleware"],
    }
    settings.JOBSAPP = {**settings.JOBSAPP, "CLIENT_MIDDLEWARE": tracking["CLIENT_MIDDLEWARE"]}
    middleware.reset_chains()
    jid = TrackedAsync.perform_async("tracked")
    assert Event.objects.get(job_id=jid).status == "enqueue"
    # When a worker with the tracking server middleware runs it
    env = {"DATABASE_URL": worker_database_url(), "JOBSAPP_TEST_OVERRIDES": json.dumps(tracking)}
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url, env=env):
        wait_until(lambda: Event.objects.get(job_id=jid).status == "finish", timeout_seconds=15, message="the event finished")
    # Then its event went through working (one attempt) to a final finish
    event = Event.objects.get(job_id=jid)
    assert event.attempts == 1 and event.is_final and event.status == "finish"


@slow
@pytest.mark.django_db(transaction=True)
def test_an_async_job_uses_djangos_async_orm(redis_server, redis):
    from django.contrib.auth.models import User

    # Given two users, and an async job that counts them with the async ORM
    User.objects.create(username="ada")
    User.objects.create(username="grace")
    AsyncOrmCount.perform_async()
    # When a worker on the same database runs it, Then it counted them
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url, env={"DATABASE_URL": worker_database_url()}):
        wait_until(lambda: redis.llen("test:orm") == 1, message="the job counted")
    assert redis.lindex("test:orm", 0) == b"2"
