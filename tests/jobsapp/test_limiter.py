"""Limiters: concurrent, window and bucket across real worker processes, a dead holder's slot,
the reschedule of a job over its limit (not a failure), and JOBSAPP["QUEUE_LIMITS"]."""

from __future__ import annotations

import json
import time

import pytest

from jobsapp import client, keys, limiter
from jobsapp.connection import get_redis
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from tests.testapp.jobs import HELD_ELSEWHERE, RAN_KEY, NeedsHeldLimiter, QueueCapped, UnderConcurrentLimit, UnderWindowLimit
from tests.workers import WorkerProcess, wait_until

INFLIGHT = keys.inflight("limiter-test")


@pytest.mark.slow
def test_four_processes_never_exceed_a_concurrent_limit_or_a_queue_cap(redis_server, redis):
    # Given 200 jobs under concurrent("api", 3), 60 jobs of a queue capped at 2 by settings only,
    # and 4 worker processes of 4 threads each
    UnderConcurrentLimit.perform_bulk([[index] for index in range(200)])
    client.push_bulk({"class": QueueCapped.wire_name(), "queue": "capped", "args": [[index] for index in range(60)]})
    overrides = {"QUEUE_LIMITS": {"capped": 2}}
    with WorkerProcess(
        ["-P", "4", "-c", "4", "-q", "default", "-q", "capped"],
        redis_url=redis_server.url,
        env={"JOBSAPP_TEST_OVERRIDES": json.dumps(overrides)},
    ):
        # When they run them all
        wait_until(
            lambda: redis.llen(RAN_KEY) == 200 and redis.llen("test:limiter:capped_peaks") == 60, timeout_seconds=90, message="all jobs ran"
        )
    # Then never more than 3 ran inside the limiter at once, nor more than 2 of the capped queue
    peaks = [int(value) for value in redis.lrange("test:limiter:peaks", 0, -1)]
    capped = [int(value) for value in redis.lrange("test:limiter:capped_peaks", 0, -1)]
    assert len(peaks) == 200 and max(peaks) <= 3 and max(peaks) == 3
    assert len(capped) == 60 and max(capped) <= 2
    assert int(redis.get("stat:failed") or 0) == 0


@pytest.mark.slow
def test_four_processes_never_start_more_than_ten_in_any_second_under_a_window(redis_server, redis):
    # Given 40 jobs under window("api-window", 10, 1) and 4 worker processes of 5 threads each
    UnderWindowLimit.perform_bulk([[index] for index in range(40)])
    with WorkerProcess(["-P", "4", "-c", "5"], redis_url=redis_server.url):
        # When they run them all
        wait_until(lambda: redis.llen("test:limiter:starts") == 40, timeout_seconds=60, message="all jobs ran")
    # Then no span of one second holds more than 10 admissions (server-clock times the window gave)
    starts = sorted(float(value) for value in redis.lrange("test:limiter:starts", 0, -1))
    assert all(starts[index + 10] - starts[index] >= 1.0 for index in range(len(starts) - 10))
    assert starts[-1] - starts[0] >= 3.0


def test_a_dead_holders_slot_is_freed_by_its_lock_timeout(redis):
    # Given a one-slot limiter whose holder died without releasing (its block never ended)
    slot = limiter.concurrent("dies", 1, lock_timeout=0.3, wait_timeout=0)
    slot.acquire()
    # When another process asks at once, then after the lock timeout
    with pytest.raises(limiter.OverLimit, match="dies"):
        slot.acquire()
    time.sleep(0.35)
    # Then the slot is free again
    assert slot.acquire().acquired_at > 0
    assert int(redis.hget("jobsapp:limiter:dies", "over_limit")) == 1


def test_a_bucket_admits_count_per_aligned_interval():
    # Given a bucket of 3 per minute
    per_minute = limiter.bucket("per-minute", 3, "minute", wait_timeout=0)
    # When it is entered 4 times, Then the 4th is over the limit until the next minute
    for _ in range(3):
        with per_minute:
            pass
    with pytest.raises(limiter.OverLimit) as error:
        per_minute.acquire()
    assert 0 < error.value.retry_in_seconds <= 60


@pytest.mark.parametrize(
    "make",
    [
        lambda: limiter.concurrent("x", 0),
        lambda: limiter.window("x", 10, "fortnight"),
        lambda: limiter.bucket("x", 5, -1),
        lambda: limiter.window("", 1, 1),
        lambda: limiter.concurrent("x", 1, wait_timeout=-1),
    ],
)
def test_bad_limits_are_refused_with_the_reason(make):
    with pytest.raises(ValueError, match=r"must be|needs"):
        make()


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_a_job_over_its_limit_is_rescheduled_not_failed(redis):
    # Given a job whose limiter's only slot is held elsewhere, and that never waits
    HELD_ELSEWHERE.acquire()
    NeedsHeldLimiter.perform_async()
    raw = redis.lmove("queue:default", INFLIGHT, "RIGHT", "LEFT")
    # When a processor runs it
    result = Processor(RetryPolicy(get_redis(), INFLIGHT)).process(UnitOfWork(raw, "default"))
    # Then it was put back in the schedule set with backoff and acked: no failure, no retry
    assert not result.failed and not result.acknowledge
    assert redis.llen(INFLIGHT) == 0 and redis.zcard("retry") == 0 and redis.zcard("dead") == 0
    ((member, run_at),) = redis.zrange("schedule", 0, -1, withscores=True)
    rescheduled = json.loads(member)
    assert rescheduled["limiter_reschedules"] == 1 and "enqueued_at" not in rescheduled
    assert time.time() + 0.5 < run_at < time.time() + 400


@pytest.mark.django_db
def test_after_too_many_reschedules_over_limit_is_a_failure(redis):
    # Given a job already rescheduled the most times, whose limiter is still full
    HELD_ELSEWHERE.acquire()
    client.push({"class": NeedsHeldLimiter.wire_name(), "args": [], "limiter_reschedules": limiter.MAX_RESCHEDULES})
    raw = redis.lmove("queue:default", INFLIGHT, "RIGHT", "LEFT")
    # When it runs again, Then it fails and is retried like any exception
    result = Processor(RetryPolicy(get_redis(), INFLIGHT)).process(UnitOfWork(raw, "default"))
    assert result.failed and redis.zcard("retry") == 1 and redis.zcard("schedule") == 0
    assert json.loads(redis.zrange("retry", 0, 0)[0])["error_class"] == "jobsapp.limiter.OverLimit"


@pytest.mark.django_db
def test_limits_show_on_the_dashboard_the_cli_and_the_metrics(django_user_model, redis):
    from io import StringIO

    from django.core.management import call_command
    from django.test import Client
    from django.urls import reverse

    # Given a concurrent limiter with one slot held and one refusal, and a window with one entry
    held = limiter.concurrent("partner", 2, wait_timeout=0)
    held.acquire()
    full = limiter.concurrent("full", 1, wait_timeout=0)
    full.acquire()
    with pytest.raises(limiter.OverLimit):
        full.acquire()
    with limiter.window("mail", 10, 60):
        pass
    from tests.testapp.jobs import UniqueRecord

    unique_jid = UniqueRecord.perform_async("locked")
    staff = Client()
    staff.force_login(django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True))
    # When the page, the CLI and the metrics are read
    page = staff.get(reverse("jobsapp:limits")).content.decode()
    out = StringIO()
    call_command("jobs", "limits", "--json", stdout=out)
    listed = {entry["name"]: entry for entry in json.loads(out.getvalue())}
    metrics = staff.get(reverse("jobsapp:metrics")).content.decode()
    # Then each shows the limiters, how full they are and the refusals
    assert 'data-limiter="partner"' in page and 'data-limiter="mail"' in page
    assert unique_jid in page, "the unique job's lock is listed with the jid holding it"
    assert (listed["partner"]["in_use"], listed["partner"]["limit"]) == (1, 2)
    assert (listed["full"]["in_use"], listed["full"]["over_limit"]) == (1, 1)
    assert listed["mail"]["in_use"] == 1 and listed["mail"]["per_seconds"] == 60
    assert 'jobs_limiter_in_use{kind="concurrent",name="partner"} 1.0' in metrics


@pytest.mark.parametrize("value", [{"imports": 0}, {"imports": "2"}, ["imports"], {"": 1}])
def test_a_bad_queue_limit_is_a_check_error_and_the_worker_refuses_it(settings, value):
    from django.core.exceptions import ImproperlyConfigured

    from jobsapp.checks import check_settings

    # Given a bad QUEUE_LIMITS setting
    settings.JOBSAPP = {**settings.JOBSAPP, "QUEUE_LIMITS": value}
    # Then the system check names it, and a processor will not be built with it
    assert [message.id for message in check_settings() if "QUEUE_LIMITS" in message.msg] == ["jobsapp.E011"]
    with pytest.raises(ImproperlyConfigured, match="QUEUE_LIMITS"):
        Processor(RetryPolicy(get_redis(), INFLIGHT))


def test_async_tasks_sharing_a_limiter_each_release_their_own_slot(redis):
    import asyncio

    shared = limiter.concurrent("aio", 2, wait_timeout=0)
    permits = {}

    async def holder(name, entered, leave):
        async with shared as permit:
            permits[name] = permit
            entered.set()
            await leave.wait()

    async def scenario():
        # Given two tasks of one event loop inside the same limiter, the first entered first
        first_in, second_in, first_leave, second_leave = (asyncio.Event() for _ in range(4))
        first = asyncio.create_task(holder("first", first_in, first_leave))
        await first_in.wait()
        second = asyncio.create_task(holder("second", second_in, second_leave))
        await second_in.wait()
        # When the first leaves while the second is still inside
        first_leave.set()
        await first
        held = [token.decode() for token in redis.zrange("jobsapp:limiter:aio:holders", 0, -1)]
        second_leave.set()
        await second
        return held

    # Then the slot still held is the second task's, and none is left at the end
    assert asyncio.run(scenario()) == [permits["second"].token]
    assert redis.zcard("jobsapp:limiter:aio:holders") == 0


# --- permits follow the job ------------------------------------------------------------------

OWNER_INFLIGHT = keys.inflight("host:1:abc")  # a reliable fetch's in-flight list: its owner is host:1:abc


@pytest.fixture(autouse=True)
def _owner_restarts_fresh():
    # production identities are never reused; these tests reuse OWNER_INFLIGHT after its shutdown
    yield
    limiter._stopped_owners.clear()


def _holders(redis, name):
    return sorted(token.decode() for token in redis.zrange(f"jobsapp:limiter:{name}:holders", 0, -1))


def test_a_slot_is_released_once_however_many_paths_release_it(redis):
    # Given a slot taken by a job of this process
    slots = limiter.concurrent("once", 2, wait_timeout=0)
    permit = limiter.holding(OWNER_INFLIGHT, "jid-1", slots.acquire)()
    # (the job ended without leaving the block: the job-ended backstop released it already)
    assert _holders(redis, "once") == []
    # When its block, the shutdown and the sweeper release it again
    again = [
        slots.release(permit),
        limiter.release_at_exit(redis, OWNER_INFLIGHT),
        limiter.release_owner(redis, "host:1:abc"),
    ]
    # Then none of them frees anything more
    assert again == [0, 0, 0]


def test_a_slot_still_held_when_its_job_ends_is_released_however_the_job_ended(redis):
    # Given a job that takes a slot and never gives it back (as a JobTimeout landing in acquire
    # after the grant, or in __exit__ before the release, leaves it), then fails
    slots = limiter.concurrent("left", 1, wait_timeout=0, lock_timeout=600)

    def job():
        slots.acquire()
        assert _holders(redis, "left")[0].startswith("jid-2:"), "the token names the job"
        assert redis.hgetall("jobsapp:permits:host:1:abc") != {}, "recorded under the process"
        raise RuntimeError("failed after the grant")

    # When the job ends
    with pytest.raises(RuntimeError):
        limiter.holding(OWNER_INFLIGHT, "jid-2", job)()
    # Then its slot is free, and its process's record of it gone
    assert _holders(redis, "left") == [] and redis.exists("jobsapp:permits:host:1:abc") == 0
    assert slots.acquire().acquired_at > 0


def test_a_process_shutting_down_releases_the_slots_of_its_jobs_still_running(redis):
    import threading

    # Given two jobs of this process inside a limiter at the shutdown deadline, and a slot held
    # by another process
    slots = limiter.concurrent("shutdown", 3, wait_timeout=0, lock_timeout=600)
    other = limiter.Concurrent("shutdown", 3, wait_timeout=0, lock_timeout=600)
    entered, leave = threading.Barrier(3), threading.Event()

    def job():
        with slots:
            entered.wait()
            leave.wait()

    threads = [threading.Thread(target=limiter.holding(OWNER_INFLIGHT, jid, job)) for jid in ("jid-a", "jid-b")]
    for thread in threads:
        thread.start()
    entered.wait()
    foreign = redis.zadd("jobsapp:limiter:shutdown:holders", {"jid-other:0123": time.time() + 600})
    # When the process shuts down (its jobs are put back on their queues)
    released = limiter.release_at_exit(redis, OWNER_INFLIGHT)
    # Then their two slots are free at once, the other process's still held
    assert (foreign, released) == (1, 2)
    assert _holders(redis, "shutdown") == ["jid-other:0123"]
    leave.set()
    for thread in threads:
        thread.join()
    assert other.release(limiter.Permit("jid-other:0123", 0.0, limiter=other)) == 1


def test_a_job_put_back_while_it_waits_for_room_never_takes_a_slot_its_shutdown_released(redis):
    import threading

    # Given a job of this process holding the only slot past the shutdown deadline, and a second
    # job of this process waiting for that slot
    slots = limiter.concurrent("put-back", 1, wait_timeout=30, lock_timeout=600)
    holding, leave = threading.Event(), threading.Event()
    started: list[str] = []
    outcomes: dict[str, BaseException | None] = {}

    def job(name):
        def run():
            try:
                with slots:
                    started.append(name)
                    holding.set()
                    leave.wait()
                outcomes[name] = None
            except BaseException as exc:  # what the waiting job got, checked below
                outcomes[name] = exc

        return run

    first = threading.Thread(target=limiter.holding(OWNER_INFLIGHT, "jid-long", job("long")))
    first.start()
    holding.wait(5)
    second = threading.Thread(target=limiter.holding(OWNER_INFLIGHT, "jid-next", job("next")))
    second.start()
    time.sleep(0.3)  # the second job polls for room
    # When the process shuts down (both jobs put back on their queue) and its slots are released
    released = limiter.release_at_exit(redis, OWNER_INFLIGHT)
    second.join(5)
    leave.set()
    first.join(5)
    # Then the waiting job stops with PutBack without starting, and the freed slot stays free
    assert released == 1
    assert started == ["long"]
    assert isinstance(outcomes["next"], limiter.PutBack)
    assert _holders(redis, "put-back") == []


def test_the_slots_of_a_dead_process_are_released_when_its_jobs_are_recovered(redis):
    from jobsapp.worker.recovery import recover_list

    # Given a process holding a slot of a 600 s lock timeout with its job in flight
    slots = limiter.concurrent("dead-holder", 1, wait_timeout=0, lock_timeout=600)
    redis.rpush("jobsapp:inflight:host:1:abc", json.dumps({"class": "X", "jid": "jid-d", "queue": "default", "args": []}))
    seen = {}

    def job_whose_process_dies():
        slots.acquire()
        # When the process is found dead and its in-flight list recovered (the sweeper, or
        # the next process in its supervisor slot) while the job still "holds" the slot
        recover_list(get_redis(), "host:1:abc")
        seen["holders"] = _holders(redis, "dead-holder")
        seen["record"] = redis.exists("jobsapp:permits:host:1:abc")

    limiter.holding(OWNER_INFLIGHT, "jid-d", job_whose_process_dies)()
    # Then the job is back on its queue and its slot was free at once
    assert redis.llen("queue:default") == 1
    assert seen == {"holders": [], "record": 0}


@pytest.mark.django_db
def test_a_job_refused_by_a_concurrent_limiter_is_woken_by_the_release(redis, caplog):
    # Given a job refused by a full one-slot limiter, rescheduled for its fallback time
    permit = HELD_ELSEWHERE.acquire()
    NeedsHeldLimiter.perform_async()
    raw = redis.lmove("queue:default", INFLIGHT, "RIGHT", "LEFT")
    with caplog.at_level("INFO", logger="jobsapp.limiter"):
        Processor(RetryPolicy(get_redis(), INFLIGHT)).process(UnitOfWork(raw, "default"))
    ((_, fallback),) = redis.zrange("schedule", 0, -1, withscores=True)
    assert fallback > time.time() + 5 and redis.llen("jobsapp:limiter:held-elsewhere:parked") == 1
    # (its log line says it runs at the release, its fallback time only as the latest)
    (line,) = [record.getMessage() for record in caplog.records if "over limit" in record.getMessage()]
    assert "'held-elsewhere': runs when a slot is released, at the latest in " in line and "rescheduled in" not in line
    # When the holder releases its slot
    assert HELD_ELSEWHERE.release(permit) == 1
    # Then the refused job is due now (the scheduler pushes it within one poll), once
    ((_, woken),) = redis.zrange("schedule", 0, -1, withscores=True)
    assert woken <= time.time() and redis.llen("jobsapp:limiter:held-elsewhere:parked") == 0


def test_a_job_parked_after_its_slot_freed_is_due_at_once(redis):
    # Given a job rescheduled for later by a full limiter, whose slot freed before it was parked
    permit = HELD_ELSEWHERE.acquire()
    member = json.dumps({"class": "X", "jid": "jid-p", "queue": "default", "args": []})
    redis.zadd("schedule", {member: time.time() + 60})
    HELD_ELSEWHERE.release(permit)
    # When it is parked
    HELD_ELSEWHERE.park(get_redis(), member)
    # Then it is due now, not parked until a release that already happened
    assert redis.zscore("schedule", member) <= time.time() and redis.llen("jobsapp:limiter:held-elsewhere:parked") == 0


def test_refusals_count_refused_entries_not_attempts(redis):
    # Given a full one-slot limiter that waits 0.5 s (ten attempts or so) before refusing
    slots = limiter.concurrent("counted", 1, wait_timeout=0.5)
    slots.acquire()
    # When two entries are refused
    for _ in range(2):
        with pytest.raises(limiter.OverLimit):
            slots.acquire()
    # Then the counter says 2
    assert int(redis.hget("jobsapp:limiter:counted", "over_limit")) == 2


@pytest.mark.django_db
def test_a_job_refused_by_a_rate_limiter_comes_back_when_the_window_has_room(redis, caplog):
    from tests.testapp.jobs import UnderWindowLimit

    # Given a window of 10 per second already full, and a job under it that does not wait
    for _ in range(10):
        limiter.window("api-window", 10, 1).acquire()
    refused_at = time.time()
    UnderWindowLimit.perform_async(1)
    raw = redis.lmove("queue:default", INFLIGHT, "RIGHT", "LEFT")
    from tests.testapp.jobs import API_WINDOW

    API_WINDOW.wait_timeout = 0.0
    try:
        with caplog.at_level("INFO", logger="jobsapp.limiter"):
            Processor(RetryPolicy(get_redis(), INFLIGHT)).process(UnitOfWork(raw, "default"))
    finally:
        API_WINDOW.wait_timeout = 5.0
    # Then it is rescheduled for when the window has room (within a second), plus a small jitter
    ((_, run_at),) = redis.zrange("schedule", 0, -1, withscores=True)
    assert refused_at < run_at <= refused_at + 1.0 + limiter.RATE_JITTER_SECONDS + 0.1
    # and its log line gives that time
    (line,) = [record.getMessage() for record in caplog.records if "over limit" in record.getMessage()]
    seconds = float(line.rsplit("runs again in ", 1)[1].removesuffix(" s"))
    assert 0 <= seconds <= 1.0 + limiter.RATE_JITTER_SECONDS + 0.1


def test_a_slot_granted_after_its_job_ended_is_given_back_at_once(redis):
    import contextvars
    import threading

    # Given a job whose limiter entry runs on in another thread after the job ended (as
    # ``async with`` waiting in ``asyncio.to_thread`` does when its job is cancelled at its timeout)
    slots = limiter.concurrent("late", 1, wait_timeout=0, lock_timeout=600)
    outcome = []

    def enter_late():
        try:
            slots.acquire()
            outcome.append("granted")
        except limiter.OverLimit:
            outcome.append("refused")

    late = []
    limiter.holding(
        OWNER_INFLIGHT, "jid-late", lambda: late.append(threading.Thread(target=contextvars.copy_context().run, args=(enter_late,)))
    )()
    # When the entry reaches Redis after the job's end
    late[0].start()
    late[0].join()
    # Then the slot it was granted is given back at once, not held for the lock timeout
    assert outcome == ["refused"] and _holders(redis, "late") == []
