"""Celery's task API on jobsapp.celery: update_state, base= handlers, apply (eager), time limits,
Ignore, Reject, task loggers, crontab and beat_schedule; run by a real runworkers on a real Redis."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobsapp import periodic
from jobsapp.celery import AsyncResult, Celery, EagerResult, Task, TimeoutError, shared_task
from jobsapp.celery.exceptions import Reject, SoftTimeLimitExceeded, TimeLimitExceeded
from jobsapp.celery.schedules import crontab, schedule
from tests.celery_sample import tasks as sample
from tests.workers import WorkerProcess, wait_until

SAMPLE_SETTINGS = {"DJANGO_SETTINGS_MODULE": "tests.celery_sample.settings"}


def _hooks(redis) -> list[list]:
    return [json.loads(raw) for raw in redis.lrange(sample.HOOKS, 0, -1)]


def test_a_base_class_must_be_a_task_class_and_is_refused_at_declaration():
    # Given a base= that is not a jobsapp.celery.Task subclass, When a task is declared with it,
    # Then the declaration fails with a clear TypeError (nothing is registered)
    class NotATask:
        pass

    with pytest.raises(TypeError, match=r"base= must be a subclass of jobsapp\.celery\.Task"):

        @shared_task(base=NotATask)  # type: ignore[type-var]
        def refused():
            return 1


def test_a_task_is_an_instance_of_a_subclass_of_its_base():
    # Given the decorator with base=, Then the task is an instance of a new subclass of the base
    # whose options are class attributes, as Celery makes tasks
    assert isinstance(sample.hooked_add, sample.RecordingTask) and isinstance(sample.hooked_add, Task)
    assert type(sample.hooked_add).__name__ == "hooked_add" and type(sample.hooked_add).bind is True
    assert sample.cleans_up_at_soft_limit.soft_time_limit == 0.5 and Task.soft_time_limit is None


def test_apply_runs_eagerly_with_handlers_retries_and_states(redis):
    # When a task is applied eagerly, Then it runs here, with its handlers, and returns an EagerResult
    result = sample.hooked_add.apply((2, 3), task_id="eager-1")
    assert isinstance(result, EagerResult) and result.id == "eager-1"
    assert (result.state, result.get()[0], result.successful(), result.ready()) == ("SUCCESS", 5, True, True)
    assert [hook[0] for hook in _hooks(redis)] == ["before_start", "on_success", "after_return"]
    # And a failure is stored in the result (get() raises it), or raised at once with throw=True
    failed = sample.hooked_fails.apply(("boom",))
    assert failed.state == "FAILURE" and failed.failed() and isinstance(failed.result, ValueError) and failed.traceback
    with pytest.raises(ValueError, match="boom"):
        failed.get()
    with pytest.raises(ValueError, match="boom"):
        sample.hooked_fails.apply(("boom",), throw=True)
    # And a retry runs again at once, request.retries one higher (Celery's eager retry)
    assert sample.hooked_retries_once.apply(("k",)).get() == 1
    # And update_state then Ignore gives the stored state (nothing is written to Redis)
    ignored = sample.stores_and_ignores.apply((["tweet"],))
    assert (ignored.state, ignored.get()) == ("SUCCESS", ["tweet"]) and not redis.keys("jobsapp:result:*")


def test_task_loggers_name_the_running_task(caplog):
    # Given a logger from get_task_logger, When the task logs, Then the record names the task and
    # its id, and the logger's parent is celery.task (Celery's logging setup applies)
    assert sample.logger.parent is not None and sample.logger.parent.name == "celery.task"
    with caplog.at_level(logging.INFO, logger=sample.__name__):
        task_id = sample.logs.apply(("hello",)).get()
    record = next(record for record in caplog.records if record.getMessage() == "logged hello")
    assert (record.task_id, record.task_name) == (task_id, sample.logs.name)


def test_crontab_and_schedule_become_periodic_jobs():
    # Given Celery's schedules, Then they read as the periodic scheduler's cron and every fields
    assert crontab().cron == "* * * * *"
    assert crontab(minute="*/15").cron == "*/15 * * * *"
    assert crontab(hour=7, minute=30, day_of_week=1).cron == "30 7 * * 1"
    assert crontab(0, 0, day_of_month="2-30/2").cron == "0 0 2-30/2 * *"
    assert crontab(minute=[0, 30], hour="9-17").cron == "0,30 9-17 * * *"
    assert schedule(30.0).periodic_fields() == {"every": 30}
    # And what a periodic job cannot do is refused when declared
    with pytest.raises(ImproperlyConfigured, match="whole number of seconds"):
        schedule(0.5)
    with pytest.raises(ImproperlyConfigured, match="relative"):
        schedule(10, relative=True)
    # When an app sets beat_schedule, Then each entry is a periodic job checked with the others
    app = Celery("proj")
    app.conf.timezone = "Europe/Paris"
    try:
        app.conf.beat_schedule = {
            "add-every-30": {"task": sample.hooked_add.name, "schedule": 30.0, "args": (16, 16)},
            "monday": {"task": sample.logs.name, "schedule": crontab(hour=7, minute=30, day_of_week=1), "args": ("hi",)},
        }
        by_name = {definition.name: definition for definition in periodic.definitions()}
        every, monday = by_name["add-every-30"], by_name["monday"]
        assert (every.every_seconds, every.args, every.job_class) == (30, [16, 16], sample.hooked_add.job_class)
        assert (monday.cron, monday.timezone, monday.args) == ("30 7 * * 1", "Europe/Paris", ["hi"])
        with pytest.raises(ImproperlyConfigured, match="only 'queue'"):
            app.conf.beat_schedule = {"x": {"task": "t", "schedule": 5, "options": {"priority": 1}}}
    finally:
        periodic.declare({}, source="beat_schedule")


def test_refused_at_declaration_what_cannot_be_honoured():
    with pytest.raises(ValueError, match="soft_time_limit"):

        @shared_task(name="refused.negative", soft_time_limit=-1)
        def negative():
            return 1

    with pytest.raises(TypeError, match="soft_time_limit cannot interrupt an async def task"):

        @shared_task(name="refused.coroutine", soft_time_limit=1)
        async def coroutine():
            return 1


@pytest.mark.slow
def test_the_task_api_on_a_real_worker(redis_server, redis):
    # Given calls of every shape, pushed before the worker starts
    progress = sample.reports_progress.delay(3)
    added = sample.hooked_add.delay(2, 3)
    failed = sample.hooked_fails.delay("boom")
    retried = sample.hooked_retries_once.delay("missing")
    stored = sample.stores_and_ignores.delay(["tweet", "tweet 2"])
    ignored = sample.ignores.delay()
    rejected = sample.rejects.delay("too big")
    requeued = sample.requeues.delay()
    soft = sample.cleans_up_at_soft_limit.delay()
    soft_uncaught = sample.ignores_soft_limit.delay()
    hard = sample.runs_past_time_limit.delay()
    per_call = sample.ignores_soft_limit.apply_async(soft_time_limit=0.3)
    untracked, tracked = sample.waits_untracked.delay(), sample.waits_tracked.delay()
    with WorkerProcess(["-c", "6"], SAMPLE_SETTINGS, redis_url=redis_server.url):
        # Then a running task is PENDING, as Celery's by default, and STARTED (with Celery's meta) when it tracks that
        started = ("celery-sample:untracked-started", "celery-sample:tracked-started")
        wait_until(lambda: all(redis.llen(key) for key in started), timeout_seconds=15)
        assert untracked.state == "PENDING" and untracked.info is None
        wait_until(lambda: tracked.state == "STARTED", timeout_seconds=5)
        assert set(tracked.info) == {"pid", "hostname"} and tracked.info["pid"] != os.getpid()
        # Then update_state's state and meta are what AsyncResult shows while the task runs
        wait_until(lambda: progress.state == "PROGRESS" and progress.info == {"current": 3, "total": 3}, timeout_seconds=15)
        assert progress.result == {"current": 3, "total": 3}
        redis.set("celery-sample:release", 1)
        assert progress.get(timeout=10) == 3 and progress.state == "SUCCESS"
        # And base= handlers are called as Celery 5 calls them, with a per-process cached attribute
        assert added.get(timeout=10) == [5, "connection-1"]
        with pytest.raises(ValueError, match="boom"):
            failed.get(timeout=10)
        assert retried.get(timeout=15) == 1
        # And Ignore keeps what the task stored itself, or leaves the task PENDING
        assert stored.get(timeout=10) == ["tweet", "tweet 2"] and stored.state == "SUCCESS"
        # And Reject files the job dead with FAILURE, or runs it again when requeued
        with pytest.raises(Reject, match="too big"):
            rejected.get(timeout=10)
        assert requeued.get(timeout=15) == "received two times"
        # And soft_time_limit raises SoftTimeLimitExceeded inside the task; time_limit fails it
        assert soft.get(timeout=15) == "cleaned up"
        with pytest.raises(SoftTimeLimitExceeded):
            soft_uncaught.get(timeout=15)
        with pytest.raises(SoftTimeLimitExceeded):
            per_call.get(timeout=15)
        with pytest.raises(TimeLimitExceeded):
            hard.get(timeout=15)
        with pytest.raises(TimeoutError):
            ignored.get(timeout=1, interval=0.1)
    hooks = _hooks(redis)
    by_task = {}
    for hook in hooks:
        task_id = next(field for field in hook[1:] if field in (added.id, failed.id, retried.id))
        by_task.setdefault(task_id, []).append(hook)
    assert by_task[added.id] == [
        ["before_start", added.id, [2, 3], {}],
        ["on_success", [5, "connection-1"], added.id, [2, 3], {}],
        ["after_return", "SUCCESS", [5, "connection-1"], added.id, [2, 3], {}, None],
    ]
    assert by_task[failed.id] == [
        ["before_start", failed.id, ["boom"], {}],
        ["on_failure", "ValueError('boom')", failed.id, ["boom"], {}, "ValueError", True],
        ["after_return", "FAILURE", "ValueError('boom')", failed.id, ["boom"], {}, None],
    ]
    assert [hook[0] for hook in by_task[retried.id]] == ["before_start", "on_retry", "before_start", "on_success", "after_return"]
    assert by_task[retried.id][1] == ["on_retry", "KeyError('missing')", retried.id, ["missing"], {}]
    # And an ignored task is acknowledged and recorded nowhere else; a rejected one is in the dead set
    assert ignored.state == "PENDING" and AsyncResult(rejected.id).failed()
    dead = [json.loads(raw)["jid"] for raw in redis.zrange("dead", 0, -1)]
    assert rejected.id in dead and ignored.id not in dead and stored.id not in dead


@pytest.mark.slow
def test_beat_schedule_ticks_once_per_second_however_many_workers(redis_server, redis):
    # Given an app whose beat_schedule runs a task every second, When two worker processes run it
    settings = {"DJANGO_SETTINGS_MODULE": "tests.celery_sample.settings_beat"}
    started = time.monotonic()
    with WorkerProcess(["-c", "2"], settings, redis_url=redis_server.url), WorkerProcess(["-c", "2"], settings, redis_url=redis_server.url):
        wait_until(lambda: redis.llen("celery-sample:ticks") >= 3, timeout_seconds=20)
        elapsed = time.monotonic() - started
        # Then each tick ran once: never more runs than seconds elapsed (plus the tick in progress)
        assert redis.llen("celery-sample:ticks") <= elapsed + 2


@pytest.mark.django_db(transaction=True)
def test_update_state_of_a_tracked_task_moves_its_progress(settings, redis):
    from jobsapp import middleware
    from tests.tracking.conftest import CLIENT, SERVER, pop_item, run_item
    from tracking.models import Event
    from tracking.writer import stop_writer

    # Given a tracked Celery task (use_task_event=True), pushed with tracking's middleware
    settings.JOBSAPP = {**settings.JOBSAPP, "CLIENT_MIDDLEWARE": [CLIENT], "SERVER_MIDDLEWARE": [SERVER]}
    middleware.reset_chains()
    try:
        result = sample.tracked_progress.delay(3)
        # When it runs and reports PROGRESS with current/total
        assert run_item(pop_item(redis)) == 3
        stop_writer()
        # Then its event carries each step's fraction, as the progress page reads them
        messages = Event.objects.get(job_id=result.id).messages
        reported = [(entry["message"], entry["done"], entry["total"]) for entry in messages if "done" in entry]
        assert reported == [("PROGRESS: 1 of 3", 1, 3), ("PROGRESS: 2 of 3", 2, 3), ("PROGRESS: 3 of 3", 3, 3)]
    finally:
        middleware.reset_chains()
        stop_writer()
