"""The django.tasks backend, exercised with Django's own API only against a real runworkers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys

import pytest

django_tasks = pytest.importorskip("django.tasks", reason="django.tasks needs Django 6.0+")

from django.tasks import TaskResultStatus, default_task_backend, task  # noqa: E402
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist  # noqa: E402
from django.tasks.signals import task_enqueued  # noqa: E402

from jobsapp import registry  # noqa: E402
from jobsapp.django_tasks import JobsBackend  # noqa: E402
from tests.workers import ROOT_DIR, WorkerProcess, wait_until  # noqa: E402


def tasks_module():
    from tests.testapp import tasks

    return tasks


def finished(result):
    result.refresh()
    return result.is_finished


def test_enqueue_answers_ready_and_pushes_a_job_without_retry(redis):
    tasks = tasks_module()
    seen = []
    task_enqueued.connect(lambda sender, task_result, **kwargs: seen.append(task_result.id), weak=False, dispatch_uid="t1")
    try:
        result = tasks.add_numbers.enqueue(2, 3)
    finally:
        task_enqueued.disconnect(dispatch_uid="t1")
    # Then the result is READY with its args, the signal fired, and the job is a registered one
    assert result.status == TaskResultStatus.READY and result.args == [2, 3] and seen == [result.id]
    item = json.loads(redis.lindex("queue:default", 0))
    assert item["class"] == "tests.testapp.tasks.add_numbers" and item["retry"] == 0 and item["retain"] > 0
    assert registry.is_registered("tests.testapp.tasks.add_numbers")
    # And get_result reads it back
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY


def test_unknown_results_are_refused():
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("0" * 24)


def prioritized_function(value: int) -> int:
    """A plain module-level function the priority test declares as a task."""
    return value


def test_a_priority_is_honoured_and_rides_in_the_payload_without_a_check_warning(settings, redis):
    tasks = tasks_module()
    settings.TASKS = {**settings.TASKS, "prioritized": {"BACKEND": "jobsapp.django_tasks.JobsBackend"}}
    # Given a task declared with a priority in Django's range
    prioritized = task(priority=10, backend="prioritized")(prioritized_function)
    # When it is enqueued
    result = prioritized.enqueue(1)
    # Then its job carries the priority and waits in the queue's priority ZSET, not in queue:default
    assert prioritized.priority == 10 and result.status == TaskResultStatus.READY
    assert prioritized.get_backend().supports_priority
    members = redis.zrange("jobsapp:pqueue:default", 0, -1)
    assert [json.loads(member)["priority"] for member in members] == [10] and redis.llen("queue:default") == 0
    # And a task of priority 0 stays a plain job without the key
    plain = tasks.add_numbers.enqueue(1, 2)
    assert (
        "priority" not in json.loads(redis.lindex("queue:default", 0)) and json.loads(redis.lindex("queue:default", 0))["jid"] == plain.id
    )
    # And Django's range check still refuses -101, 101 and 3.1
    assert tasks.add_numbers.using(priority=-100).priority == -100
    for bad in (-101, 101, 3.1):
        with pytest.raises(InvalidTask, match="priority must be a whole number"):
            tasks.add_numbers.using(priority=bad)
    # And manage.py check has nothing to say about priorities
    assert [message.id for message in prioritized.get_backend().check() if message.id.startswith("jobsapp.W")] == []


def test_options_are_the_options_given():
    # Given backends with and without OPTIONS, Then options echo exactly what settings gave
    assert JobsBackend("other", {"OPTIONS": {"RETRY": 2}}).options == {"RETRY": 2}
    assert JobsBackend("other", {}).options == {}


def test_system_check_reports_bad_options(settings):
    backend = JobsBackend("other", {"QUEUES": ["nowhere"], "OPTIONS": {"RETRY": "yes", "COLOUR": 1}})
    ids = {message.id for message in backend.check()}
    assert {"jobsapp.E202", "jobsapp.E203", "jobsapp.W201"} <= ids
    assert JobsBackend("default", {}).check() == []


def test_enqueue_returns_what_get_result_reads_back(redis):
    tasks = tasks_module()
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    # Given tasks enqueued at once, on another queue, and deferred
    for enqueued in (
        tasks.add_numbers.enqueue(2, 3),
        tasks.add_numbers.using(queue_name="critical").enqueue(4, 5),
        tasks.add_numbers.using(run_after=later).enqueue(1, 1),
    ):
        original = dataclasses.asdict(enqueued)
        # When the result is read back, and refreshed
        read = default_task_backend.get_result(enqueued.id)
        enqueued.refresh()
        # Then get_result answers the same result, and refresh() changes nothing
        assert read == enqueued
        assert dataclasses.asdict(enqueued) == original
        assert enqueued.enqueued_at is not None


@pytest.mark.slow
def test_tasks_run_on_real_workers(redis_server, redis):
    tasks = tasks_module()
    # Given tasks enqueued with Django's API: plain, failing, with context, async, deferred
    ok = tasks.add_numbers.enqueue(20, 22)
    bad = tasks.fail_task.enqueue("boom")
    context = tasks.which_attempt.enqueue()
    doubled = tasks.async_double.enqueue(21)
    later_time = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1.5)
    later = tasks.add_numbers.using(run_after=later_time).enqueue(1, 1)
    assert redis.zcard("schedule") == 1
    # When a worker runs them
    with WorkerProcess(["-c", "4", "-q", "default", "-q", "critical"], redis_url=redis_server.url):
        for result in (ok, bad, context, doubled, later):
            wait_until(lambda result=result: finished(result), timeout_seconds=15, message=f"{result.task.name} finished")
    # Then each result is what Django's immediate backend would say
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 42
    assert ok.started_at <= ok.finished_at and len(ok.worker_ids) == 1 and ok.attempts == 1
    assert bad.status == TaskResultStatus.FAILED and bad.errors[0].exception_class_path == "builtins.ValueError"
    assert "ValueError: boom" in bad.errors[0].traceback and bad.errors[0].exception_class is ValueError
    assert context.return_value == {"attempt": 1, "id": context.id}
    assert doubled.return_value == 42
    assert later.return_value == 2 and later.started_at >= later_time
    # And the worker sent task_started and task_finished
    signals = {value.decode() for value in redis.lrange("test:task-signals", 0, -1)}
    assert {f"{ok.id}:RUNNING", f"{ok.id}:SUCCESSFUL", f"{bad.id}:FAILED"} <= signals
    # And the failed task went to the dead set (retry 0), where an operator can retry it
    assert redis.zcard("dead") == 1


def test_async_enqueue_and_get_result_and_the_retry_option(redis, settings):
    import asyncio

    tasks = tasks_module()

    # Given Django's async API, When a task is enqueued and read back, Then both work
    async def enqueue_and_read():
        result = await tasks.add_numbers.aenqueue(4, 5)
        return result, await default_task_backend.aget_result(result.id)

    enqueued, read = asyncio.run(enqueue_and_read())
    assert read.id == enqueued.id and read.status == TaskResultStatus.READY and read.args == [4, 5]
    # And with OPTIONS["RETRY"] a task's job is retried that many times
    settings.TASKS = {"default": {"BACKEND": "jobsapp.django_tasks.JobsBackend", "OPTIONS": {"RETRY": 2}}}
    tasks.add_numbers.enqueue(1, 1)
    assert json.loads(redis.lindex("queue:default", 0))["retry"] == 2


@pytest.mark.django_db
def test_enqueue_in_a_transaction_pushes_at_once_as_django_backends_do(redis):
    from django.db import transaction

    tasks = tasks_module()
    with transaction.atomic():
        result = tasks.add_numbers.enqueue(7, 8)
        assert json.loads(redis.lindex("queue:default", 0))["jid"] == result.id


PRIORITIZED_TASKS = """
from django.tasks import task


@task(priority=50)
def urgent(value):
    return value
"""

PRIORITIZED_SETTINGS = """
from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "prioritized_app"]
TASKS = {"default": {"BACKEND": "jobsapp.django_tasks.JobsBackend"}}
"""


@pytest.mark.slow
def test_a_tasks_py_with_a_priority_passes_check_and_runworkers_starts(tmp_path, redis_server):
    # Given an installed app whose tasks.py declares @task(priority=50)
    (tmp_path / "prioritized_app").mkdir()
    (tmp_path / "prioritized_app" / "__init__.py").write_text("")
    (tmp_path / "prioritized_app" / "tasks.py").write_text(PRIORITIZED_TASKS)
    (tmp_path / "prioritized_settings.py").write_text(PRIORITIZED_SETTINGS)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT_DIR)]), "DJANGO_SETTINGS_MODULE": "prioritized_settings"}
    # When manage.py check runs, Then it passes without a word about the priority
    checked = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT_DIR,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    assert "priority" not in checked.stderr
    # And runworkers starts and registers itself
    with WorkerProcess(["-P", "1", "-c", "1"], env=env, redis_url=redis_server.url) as worker:
        assert worker.info()["pid"] == worker.pid
