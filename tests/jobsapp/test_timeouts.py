"""Job timeouts: ``sidekiq_options(timeout=seconds)`` validated where it is declared and pushed,
enforced on sync jobs by the watchdog, and never landing outside the job."""

from __future__ import annotations

import json
import logging
import re
import threading
import time

import pytest
from django.test import Client
from django.urls import reverse

from jobsapp import Job, JobTimeout, client, keys, sidekiq_options
from jobsapp.checks import check_settings
from jobsapp.connection import get_redis
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from jobsapp.worker.timeouts import Watchdog, timeout_seconds
from tests.jobsapp import sidekiq_data as data
from tests.manual_clock import REAL_SECONDS_LIMIT, ManualClock
from tests.testapp.jobs import RAN_KEY, BlockInC, SleepWhere, Spin
from tests.workers import WorkerProcess, wait_until


@pytest.mark.parametrize("bad", [0, -1, "30", True, float("inf"), float("nan"), [5]])
def test_a_bad_timeout_is_refused_where_the_class_is_declared(bad):
    # Given / When a class declares a timeout that is not a positive number of seconds
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):

        @sidekiq_options(timeout=bad)
        class BadTimeout(Job):
            abstract = True

            def perform(self) -> None: ...


@pytest.mark.parametrize("bad", [0, -5, "soon"])
def test_a_bad_timeout_is_refused_at_push_and_nothing_is_written(redis, bad):
    # Given a raw item with a bad timeout
    item = {"class": "HardWorker", "args": [], "timeout": bad}
    # When it is pushed, Then it is refused with the option named, and no queue has it
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        client.push(item)
    assert redis.llen("queue:default") == 0


def test_timeout_seconds_reads_the_payload():
    # Given payloads with and without a timeout, Then the helper answers seconds or None
    assert timeout_seconds({"class": "X"}) is None
    assert timeout_seconds({"class": "X", "timeout": None}) is None
    assert timeout_seconds({"class": "X", "timeout": 2}) == 2.0
    # And JobTimeout built without arguments (as an asynchronous exception is) has a message
    assert str(JobTimeout()) == "the job ran past its timeout"


# --- the sync timeout, in a processor thread ------------------------------------------------

INFLIGHT = keys.inflight("timeouts-test")


@pytest.fixture
def watchdog():
    """A watchdog of this test's own, its thread stopped afterwards."""
    instance = Watchdog()
    yield instance
    instance.stop()


def take(redis, queue: str = "default") -> UnitOfWork:
    """Move the next job of ``queue`` in flight, as a fetcher would."""
    return UnitOfWork(redis.lmove(f"queue:{queue}", INFLIGHT, "RIGHT", "LEFT"), queue)


def retried(redis) -> list[dict]:
    return [json.loads(member) for member in redis.zrange("retry", 0, -1)]


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_a_sync_job_looping_past_its_timeout_lands_in_the_retry_set_with_job_timeout(redis, watchdog, caplog):
    # Given a job that would spin in Python for 30 s, with a 0.3 s timeout
    caplog.set_level(logging.WARNING, logger="jobsapp.timeouts")
    jid = Spin.set(timeout=0.3).perform_async(30, "spun")
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT), watchdog=watchdog)
    # When a processor runs it
    started = time.monotonic()
    result = processor.process(take(redis))
    elapsed = time.monotonic() - started
    # Then it stopped soon after its timeout (a generous bound), never finished, and is a failure
    assert elapsed < 5, elapsed
    assert redis.llen(RAN_KEY) == 0 and result.failed and not result.acknowledge
    # And it waits in the retry set with JobTimeout and the timeout in its message, out of flight
    (failed,) = retried(redis)
    assert failed["jid"] == jid and failed["error_class"] == "jobsapp.errors.JobTimeout"
    assert failed["error_message"] == "the job ran past its timeout of 0.3 s" and failed["retry_count"] == 0
    assert redis.llen(INFLIGHT) == 0
    # And the watchdog's log line names the job as the processor's lines do
    (line,) = [record.getMessage() for record in caplog.records if record.name == "jobsapp.timeouts"]
    assert line.startswith(f"class={Spin.__module__}.Spin jid={jid} queue=default ") and "past its timeout of 0.3 s" in line


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_a_job_within_its_timeout_is_untouched_and_its_thread_stays_usable(redis, watchdog):
    # Given a job well within its timeout, then one without a timeout, in the same thread
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT), watchdog=watchdog)
    Spin.set(timeout=5).perform_async(0.05, "quick")
    Spin.perform_async(0.3, "untimed")
    # When both run
    first = processor.process(take(redis))
    second = processor.process(take(redis))
    # Then both succeeded, the watchdog never fired, and nothing is left guarded
    assert not first.failed and not second.failed
    assert redis.lrange(RAN_KEY, 0, -1) == [b"quick", b"untimed"]
    assert watchdog.fired_total == 0 and watchdog.running() == {}


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_expired_leases_interrupt_the_guarded_jobs_and_a_job_no_longer_in_flight_is_filed_nowhere(redis, watchdog):
    # Given a job spinning 30 s under a 60 s timeout, in a processor thread
    Spin.set(timeout=60).perform_async(30, "spun")
    unit = take(redis)
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT), watchdog=watchdog)
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(processor.process(unit)))
    thread.start()
    wait_until(lambda: watchdog.running(), message="the job runs under its guard")
    # and another process's recovery has taken it (it is no longer in this process's in-flight list)
    redis.delete(INFLIGHT)
    # When the leases expire (its process was declared dead)
    assert watchdog.expire_leases() == 1
    thread.join(10)
    # Then the job stopped at once, never finished, and was filed nowhere: it is the other process's now
    assert not thread.is_alive()
    (result,) = outcome
    assert result.failed and not result.acknowledge
    assert redis.llen(RAN_KEY) == 0 and redis.zcard("retry") == 0 and redis.zcard("dead") == 0
    assert watchdog.running() == {}


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_a_timeout_firing_as_perform_returns_never_lands_in_the_engine(redis, watchdog):
    # Given many jobs whose timeout is about as long as they run (the watchdog races their end),
    # and jobs ending in a blocking C call that outlives the timeout (the exception is pending
    # when perform returns)
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT), watchdog=watchdog)
    for index in range(60):
        Spin.set(timeout=0.004 + (index % 5) * 0.001).perform_async(0.005, f"spin-{index}")
    for index in range(5):
        BlockInC.set(timeout=0.02).perform_async(0.05, f"block-{index}")
    # When one thread runs them all, then spins in Python (where a stray exception would land)
    results = [processor.process(take(redis)) for _ in range(65)]
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        pass
    # Then each job either succeeded or went to retry with JobTimeout: nothing was parked as an
    # engine failure, nothing raised out of the processor, and no guard is left behind
    failed = {item["jid"] for item in retried(redis)}
    assert all(item["error_class"] == "jobsapp.errors.JobTimeout" for item in retried(redis))
    assert redis.zcard("dead") == 0 and redis.llen(INFLIGHT) == sum(1 for result in results if result.acknowledge)
    assert {result.jid for result in results if result.failed} == failed
    assert watchdog.fired_total > 0 and watchdog.running() == {}
    # And the blocking jobs sat out their whole C call (not interruptible), then failed with it
    assert all(result.failed and result.elapsed_seconds >= 0.05 for result in results[60:])


# --- the hard limit: a -P child whose job ignores JobTimeout is recycled -------------------


@pytest.mark.slow
def test_the_hard_limit_recycles_a_child_and_its_other_jobs_are_put_back_and_run(redis_server, redis):
    # Given a job stuck 60 s in one C call with a 1 s timeout, then jobs of 4 s for every thread
    stuck_jid = BlockInC.set(timeout=1).perform_async(60, "stuck")
    SleepWhere.perform_bulk([[4, f"other-{index}"] for index in range(7)])
    overrides = json.dumps({"TIMEOUT_HARD_LIMIT_SECONDS": 1})
    # When two children of 4 threads run them with a hard limit of 1 s past the timeout
    with WorkerProcess(["-P", "2", "-c", "4"], {"JOBSAPP_TEST_OVERRIDES": overrides}, redis_url=redis_server.url) as worker:
        wait_until(lambda: redis.zcard("retry") == 1, timeout_seconds=20, message="the stuck job was filed")
        started = [value.decode() for value in redis.lrange("test:started", 0, -1)]
        stuck_pid = next(entry.split(":")[1] for entry in started if entry.startswith("stuck:"))
        # Then that child exits and the supervisor starts a fresh one in its slot
        wait_until(lambda: f"exited ({70})" in worker.output, timeout_seconds=20, message="the stuck child exited")
        wait_until(lambda: worker.output.count("started worker process") >= 3, timeout_seconds=20, message="a new child started")
        # And every other job ran to the end, those the stuck child held included (put back, run again)
        wait_until(lambda: redis.llen(RAN_KEY) >= 7, timeout_seconds=30, message="the other jobs ran")
    ran = sorted({value.decode() for value in redis.lrange(RAN_KEY, 0, -1)})
    assert ran == [f"other-{index}" for index in range(7)]
    held_by_stuck_child = [entry for entry in started if entry.endswith(f":{stuck_pid}") and not entry.startswith("stuck:")]
    assert held_by_stuck_child, f"the stuck child ran no other job: {started}"
    assert "put back" in worker.output
    # (the stuck job itself was filed, not put back: no line, no on_requeue says otherwise)
    assert not any(stuck_jid in line and "put back" in line for line in worker.output.splitlines())
    # And the stuck job is in the retry set with JobTimeout saying why, and in no queue
    (failed,) = retried(redis)
    assert failed["jid"] == stuck_jid and failed["error_class"] == "jobsapp.errors.JobTimeout"
    assert "still running 1 s later" in failed["error_message"] and "worker process was stopped" in failed["error_message"]
    assert redis.llen("queue:default") == 0


# --- the busy page shows the overrun ----------------------------------------------------------


@pytest.mark.django_db
def test_the_busy_page_shows_elapsed_time_and_a_timeout_overrun(redis, django_user_model):
    # Given a process running (in Sidekiq's busy format) a job 95 s into its 30 s timeout, one
    # 10 s into its 30 s timeout, and one without a timeout
    overrun = data.job("app.jobs.CallPartner", timeout=30)
    within = data.job("app.jobs.CallPartner", timeout=30)
    untimed = data.job("app.jobs.Untimed")
    name = data.process(redis, running=[overrun, within, untimed])
    now = int(time.time())
    for thread, item, seconds in (("tid0", overrun, 95), ("tid1", within, 10), ("tid2", untimed, 200)):
        entry = json.dumps({"queue": "default", "payload": data.dump(item).decode(), "run_at": now - seconds})
        redis.hset(keys.work(name), thread, entry)
        redis.hset(keys.workers(name), thread, entry)
    staff = django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    # When the Busy page is shown
    page = browser.get(reverse("jobsapp:busy")).content.decode()
    # (the page is rendered a moment after the entries were written: as many seconds later as
    # the machine took, counted here, so a loaded machine's slower login shifts both bounds)
    late = int(time.time()) - now + 1  # + 1: the page rounds to the nearest second
    # Then the overrunning job says so with both numbers, the other timed job shows its timeout,
    # and every job shows how long it has run
    rows = {jid: page[page.index(jid) : page.index("</tr>", page.index(jid))] for jid in (overrun["jid"], within["jid"], untimed["jid"])}
    shown = re.search(r"overrunning: timeout 30 s, running (\d+) s", rows[overrun["jid"]])
    assert shown and 95 <= int(shown.group(1)) <= 95 + late
    assert "timeout 30 s" in rows[within["jid"]] and "overrunning" not in rows[within["jid"]]
    shown = re.search(r'<td class="running">(\d+) s ', rows[within["jid"]])
    assert shown and 10 <= int(shown.group(1)) <= 10 + late
    assert "timeout" not in rows[untimed["jid"]] and "3 min" in rows[untimed["jid"]]
    assert page.count('class="overrunning"') == 1


@pytest.mark.parametrize("bad", [0, -1, "30", True, float("inf")])
def test_a_bad_hard_limit_is_a_system_check_error(settings, bad):
    # Given a hard limit that is not a positive number of seconds, When the checks run
    settings.JOBSAPP = {**settings.JOBSAPP, "TIMEOUT_HARD_LIMIT_SECONDS": bad}
    messages = {message.id: message for message in check_settings()}
    # Then it is jobsapp.E020, with a hint; None (the default) and a number pass
    assert "jobsapp.E020" in messages and "None" in (messages["jobsapp.E020"].hint or "")
    settings.JOBSAPP = {**settings.JOBSAPP, "TIMEOUT_HARD_LIMIT_SECONDS": 2.5}
    assert check_settings() == []
    settings.JOBSAPP = {**settings.JOBSAPP, "TIMEOUT_HARD_LIMIT_SECONDS": None}
    assert check_settings() == []


def test_leaving_a_guard_clears_a_timeout_fired_but_not_yet_delivered():
    # Given a watchdog whose interruptions are only recorded (as if never delivered in time)
    calls: list[tuple[int, object]] = []
    watchdog = Watchdog(interrupt=lambda thread_id, exception: calls.append((thread_id, exception)))
    try:
        # When a perform outlives its timeout inside one blocking call, then returns
        result = watchdog.within(0.05, lambda: time.sleep(0.3) or "done")()
    finally:
        watchdog.stop()
    # Then the watchdog fired once at this thread, leaving cleared it, and the result came back
    me = threading.get_ident()
    assert calls == [(me, JobTimeout), (me, None)]
    assert result == "done" and watchdog.fired_total == 1 and watchdog.running() == {}


def test_on_its_clock_the_watchdog_fires_at_the_timeout_then_the_hard_limit_and_stops_at_once(caplog):
    # Given a watchdog on a manual clock with a 10 s hard limit, whose interruptions are recorded
    caplog.set_level(logging.WARNING, logger="jobsapp.timeouts")
    clock = ManualClock()
    calls: list[tuple[int, object]] = []
    filed, hard_limit, release = threading.Event(), threading.Event(), threading.Event()
    watchdog = Watchdog(
        hard_limit_seconds=10.0,
        on_hard_limit=hard_limit.set,
        clock=clock,
        interrupt=lambda thread_id, exception: calls.append((thread_id, exception)),
    )
    before = set(threading.enumerate())
    # When a perform with a 30 s timeout starts (its blocking call ignores JobTimeout)
    perform = watchdog.within(
        30.0,
        lambda: release.wait(REAL_SECONDS_LIMIT),
        on_stuck=filed.set,
        class_name="app.jobs.CallPartner",
        jid="abc123",
        queue="partners",
    )
    performing = threading.Thread(target=perform)
    performing.start()
    try:
        # Then the watchdog's thread starts and waits exactly the timeout
        clock.settle(1)
        assert clock.waits == [30.0]
        (thread,) = [thread for thread in set(threading.enumerate()) - before if thread.name == "jobsapp.timeouts"]
        # When 30 s pass, Then JobTimeout is raised in the perform's thread, and it waits the hard limit
        clock.advance_and_settle(30.0)
        assert calls == [(performing.ident, JobTimeout)] and clock.waits[-1] == 10.0
        assert not filed.is_set() and not hard_limit.is_set()
        # When 10 s more pass, Then the job is filed and the process told to stop
        clock.advance_and_settle(10.0)
        assert filed.is_set() and hard_limit.is_set() and watchdog.stuck_total == 1
        # And both log lines name the job (class, jid, queue) as the processor's lines do
        lines = [(record.levelname, record.getMessage()) for record in caplog.records if record.name == "jobsapp.timeouts"]
        assert [level for level, _ in lines] == ["WARNING", "ERROR"]
        assert all(message.startswith("class=app.jobs.CallPartner jid=abc123 queue=partners thread=") for _, message in lines)
        assert "past its timeout of 30 s" in lines[0][1] and "still running 10 s after" in lines[1][1]
    finally:
        release.set()
        performing.join(REAL_SECONDS_LIMIT)
        # When it is stopped, idle, Then its thread ends at once (no clock advance needed)
        watchdog.stop(clock.monotonic() + 5.0)
    assert not thread.is_alive()
    assert calls[-1] == (performing.ident, None) and watchdog.running() == {}
