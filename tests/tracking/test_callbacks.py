"""Batch callbacks: Task.objects.launch(on_complete=..., on_success=...) fire once when the task
finishes, with its id and counts; jobs added to a running task; and real workers racing to
finish a task."""

from __future__ import annotations

import json

import pytest

from tests.testapp.jobs import ImportRow, OnComplete, OnSuccess
from tests.tracking.conftest import CLIENT, SERVER, pop_item, run_item
from tests.tracking.jobs import FailsOnPurpose, Succeeds
from tests.workers import WorkerProcess, wait_until, worker_database_url
from tracking import launching
from tracking.errors import BusinessFailure
from tracking.models import Task


def callbacks(redis) -> list[dict]:
    return [json.loads(raw) for raw in reversed(redis.lrange("queue:callbacks", 0, -1))]


@pytest.mark.django_db(transaction=True)
def test_complete_and_success_fire_once_with_the_task_id_and_counts(redis):
    # Given a task of three jobs with both callbacks
    task = Task.objects.launch(Succeeds, [[1], [2], [3]], on_complete=OnComplete, on_success=OnSuccess)
    # When its jobs run (no callback before the last one settles), and the check runs again
    run_item(pop_item(redis))
    run_item(pop_item(redis))
    assert callbacks(redis) == []
    run_item(pop_item(redis))
    launching.settle_check([task.pk])
    # Then each callback was pushed once, with the task's id and counts
    pushed = callbacks(redis)
    assert [item["class"] for item in pushed] == [OnComplete.wire_name(), OnSuccess.wire_name()]
    assert all(item["args"] == [task.pk, {"total": 3, "finish": 3, "failed": 0, "error": 0, "cancelled": 0}] for item in pushed)
    task.refresh_from_db()
    assert task.status == "finished" and task.complete_fired and task.success_fired


@pytest.mark.django_db(transaction=True)
def test_a_failed_job_fires_complete_but_not_success(redis):
    # Given a task where one job fails on purpose
    task = Task.objects.launch(Succeeds, [[1], [2]], on_complete=OnComplete, on_success=OnSuccess)
    run_item(pop_item(redis))
    with pytest.raises(BusinessFailure):
        run_item({**pop_item(redis), "class": FailsOnPurpose.wire_name(), "args": ["no stock"]})
    # Then only the complete callback fired, counting the failure
    (pushed,) = callbacks(redis)
    assert pushed["class"] == OnComplete.wire_name()
    assert pushed["args"] == [task.pk, {"total": 2, "finish": 1, "failed": 1, "error": 0, "cancelled": 0}]


@pytest.mark.django_db(transaction=True)
def test_jobs_added_to_a_running_task_are_waited_for(redis):
    # Given a running task of one job, which adds two more jobs to it while it runs
    task = Task.objects.launch(Succeeds, [[1]], on_complete=OnComplete)
    first = pop_item(redis)
    added = Task.objects.add_jobs(task, Succeeds, [[2], [3]])
    run_item(first)
    # Then the task is not finished and the callback has not fired after the first job
    task.refresh_from_db()
    assert task.total == 3 and task.finished_at is None and callbacks(redis) == []
    # When the added jobs run, Then the task finishes and the callback fires once, counting all three
    items = [pop_item(redis), pop_item(redis)]
    assert sorted(item["jid"] for item in items) == sorted(added)
    for item in items:
        run_item(item)
    (pushed,) = callbacks(redis)
    assert pushed["args"] == [task.pk, {"total": 3, "finish": 3, "failed": 0, "error": 0, "cancelled": 0}]


@pytest.mark.django_db(transaction=True)
def test_an_empty_task_completes_at_once_and_bad_callbacks_are_refused(redis):
    task = Task.objects.launch(Succeeds, [], on_complete=OnComplete)
    assert [item["args"] for item in callbacks(redis)] == [[task.pk, {"total": 0, "finish": 0, "failed": 0, "error": 0, "cancelled": 0}]]
    with pytest.raises(TypeError, match="on_success must be a Job class"):
        Task.objects.launch(Succeeds, [[1]], on_success=print)
    assert Task.objects.count() == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_workers_racing_to_finish_a_task_fire_its_callbacks_once(redis_server, redis):
    # Given a task of 40 jobs with both callbacks, run by two worker processes of 8 threads each
    env = {
        "DATABASE_URL": worker_database_url(),
        "JOBSAPP_TEST_OVERRIDES": json.dumps({"CLIENT_MIDDLEWARE": [CLIENT], "SERVER_MIDDLEWARE": [SERVER]}),
    }
    task = Task.objects.launch(ImportRow, [[index] for index in range(40)], on_complete=OnComplete, on_success=OnSuccess)
    with WorkerProcess(["-P", "2", "-c", "8", "-q", "imports", "-q", "callbacks"], env=env, redis_url=redis_server.url):
        # When they run every job and the callbacks
        wait_until(lambda: redis.llen("test:callbacks") >= 2, timeout_seconds=60, message="both callbacks ran")
        wait_until(lambda: redis.llen("queue:callbacks") == 0, timeout_seconds=10, message="the callback queue drained")
    # Then each callback ran exactly once, with the task's counts
    ran = sorted(value.decode() for value in redis.lrange("test:callbacks", 0, -1))
    assert ran == [f"complete:{task.pk}:40:40", f"success:{task.pk}:40"]


@pytest.mark.django_db(transaction=True)
def test_a_callback_redis_refuses_is_logged_and_the_task_still_finishes(redis, settings, caplog):
    from jobsapp import connection
    from tests.redis_server import free_port

    # Given a task's last job taken by a worker, and then Redis going away
    task = Task.objects.launch(Succeeds, [[1]], on_complete=OnComplete)
    item = pop_item(redis)
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    connection.reset()
    # When the job finishes, Then the job is not failed by it, the task finishes, and the lost
    # callback is logged with the task's id
    run_item(item)
    task.refresh_from_db()
    assert task.status == "finished" and task.complete_fired
    assert any(task.pk in record.getMessage() and "will not run" in record.getMessage() for record in caplog.records)
