"""Cancelling a tracked task (``tracking.launching.cancel``): from the admin and the ``jobs``
command as from the API (test_api.py); no job joins a cancelled task; and, with a real worker
process on the test database (a file on SQLite, or PostgreSQL), a task of 1,000 jobs cancelled
mid-run ends with exact counts: done + failed + errors + cancelled = total, every event final."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Count
from django.urls import reverse

from tests.faults.cancel_jobs import TrackedSpins
from tests.tracking.conftest import CLIENT, SERVER
from tests.tracking.jobs import Succeeds
from tests.workers import WorkerProcess, wait_until, worker_database_url
from tracking import launching
from tracking.errors import TaskCancelled
from tracking.models import Event, Task


@pytest.fixture
def launched(django_capture_on_commit_callbacks):
    """A task launched with its jobs pushed (a test's transaction never commits)."""

    def launch(job_class, args_list, **kwargs) -> Task:
        with django_capture_on_commit_callbacks(execute=True):
            return Task.objects.launch(job_class, args_list, **kwargs)

    return launch


@pytest.mark.django_db
def test_no_job_joins_a_cancelled_task(launched, redis):
    # Given a cancelled task
    task = launched(Succeeds, [[1], [2]])
    outcome = launching.cancel(task)
    assert (outcome.first, outcome.removed) == (True, 2)
    # When jobs are added to it, pushed into it by id, or its errored jobs retried, Then each is refused
    with pytest.raises(TaskCancelled):
        Task.objects.add_jobs(task, Succeeds, [[3]])
    with pytest.raises(TaskCancelled):
        Succeeds.set(task_id=task.pk).perform_async(4)
    with pytest.raises(TaskCancelled):
        launching.retry_errored(task)
    # And nothing was written or pushed
    task.refresh_from_db()
    assert task.total == 2 and Event.objects.filter(task=task).count() == 2
    assert redis.llen("queue:default") == 0
    # And cancelling again reports it was cancelled already
    assert launching.cancel(task).first is False


@pytest.mark.django_db
def test_a_cancelled_task_fires_on_complete_never_on_success(launched, redis):
    from tests.tracking.jobs import FailsOnPurpose

    task = launched(Succeeds, [[1]], on_complete=FailsOnPurpose, on_success=Succeeds)
    launching.cancel(task)
    task.refresh_from_db()
    assert task.finished_at is not None and task.complete_fired and not task.success_fired


@pytest.mark.django_db
def test_the_admin_action_cancels_the_selected_tasks(admin_client, launched, redis):
    task = launched(Succeeds, [[1], [2], [3]])
    url = reverse("admin:tracking_task_changelist")
    response = admin_client.post(url, {"action": "cancel_tasks", "_selected_action": [task.pk]}, follow=True)
    assert response.status_code == 200
    assert "Cancelled 1 task(s): 3 waiting job(s) removed, 0 running job(s) being stopped." in response.content.decode()
    task = Task.objects.with_counts().get(pk=task.pk)
    assert task.status == "cancelled" and task.counts["cancelled"] == 3
    assert admin_client.get(url + "?status=cancelled").content.decode().count(task.pk[:8]) >= 1


@pytest.mark.django_db
def test_the_jobs_command_cancels_a_task(launched, redis):
    task = launched(Succeeds, [[1], [2]])
    out = StringIO()
    call_command("jobs", "task-cancel", task.pk, stdout=out)
    assert f"Cancelled task {task.pk}: 2 waiting job(s) removed, 0 running job(s) being stopped." in out.getvalue()
    out = StringIO()
    call_command("jobs", "--json", "task-cancel", task.pk, stdout=out)
    assert json.loads(out.getvalue()) == {"task": task.pk, "already_cancelled": True, "removed": 0, "stopping": 0}
    with pytest.raises(CommandError, match="no task"):
        call_command("jobs", "task-cancel", "0" * 32, stdout=StringIO())


@pytest.mark.django_db(transaction=True)
def test_a_task_cancelled_while_it_launches_in_the_background_pushes_none_of_its_jobs(settings, redis):
    from tests.tracking.conftest import pop_item, run_item

    # Given a task launched in the background (chunks of two), its first chunk written and pushed
    settings.TRACKING = {"LAUNCH_INLINE_JOBS": 2, "LAUNCH_CHUNK_JOBS": 2}
    task = Task.objects.launch(Succeeds, [[index] for index in range(4)])
    first_chunk, second_chunk = pop_item(redis), pop_item(redis)
    run_item(first_chunk)
    assert redis.llen("queue:default") == 2
    # When it is cancelled, and then its second chunk runs
    launching.cancel(task)
    run_item(second_chunk)
    # Then no job of it is left to run, and it finished with every job cancelled
    assert redis.llen("queue:default") == 0
    task = Task.objects.with_counts().get(pk=task.pk)
    assert task.status == "cancelled" and task.finished_at is not None and task.launching == 0
    assert task.counts == {"enqueue": 0, "working": 0, "finish": 0, "failed": 0, "error": 0, "cancelled": 4}


JOBS = 1_000


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_task_of_a_thousand_jobs_cancelled_mid_run_ends_with_exact_counts(redis_server, redis):
    # Given a worker of ten threads running a task of 1,000 jobs of about 20 ms each
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.faults.settings",
        "DATABASE_URL": worker_database_url(),
        "JOBSAPP_TEST_OVERRIDES": json.dumps({"CLIENT_MIDDLEWARE": [CLIENT], "SERVER_MIDDLEWARE": [SERVER]}),
    }
    with WorkerProcess(["-q", "default", "-c", "10"], env=env, redis_url=redis_server.url) as worker:
        task = Task.objects.launch(TrackedSpins, [[0.02]] * JOBS)
        wait_until(
            lambda: Task.objects.with_counts().get(pk=task.pk).counts["finish"] >= 200,
            timeout_seconds=60,
            interval_seconds=0.02,
            message="a fifth of the jobs done",
        )
        # When it is cancelled mid-run
        outcome = launching.cancel(task, by="the test")

        # Then it finishes once its running jobs stopped, and its counts add up exactly
        def finished() -> bool:
            return Task.objects.filter(pk=task.pk, finished_at__isnull=False).exists()

        try:
            wait_until(finished, timeout_seconds=60, interval_seconds=0.1, message="the cancelled task finished")
        except AssertionError:
            raise AssertionError(f"{Task.objects.with_counts().get(pk=task.pk).counts}\n{worker.output[-3000:]}") from None
    task = Task.objects.with_counts().get(pk=task.pk)
    counts = task.counts
    assert task.status == "cancelled"
    assert counts["enqueue"] == 0 and counts["working"] == 0
    assert counts["finish"] + counts["failed"] + counts["error"] + counts["cancelled"] == JOBS == task.total
    assert counts["finish"] >= 200 and counts["cancelled"] > 0
    # (the jobs the worker took while the waiting ones were being removed were cancelled by the
    # worker as they started; a job being stopped may have returned first: it counts done)
    assert counts["cancelled"] >= outcome.removed + outcome.settled_here
    # And the counts are what the events say, every event final
    by_status = dict(Event.objects.filter(task=task).values_list("status").annotate(Count("id")))
    assert by_status == {status: number for status, number in counts.items() if number}
    assert not Event.objects.filter(task=task, is_final=False).exists()
    # And nothing of it is left in Redis: no queued, in-flight, retried or dead job
    assert redis.llen("queue:default") == 0 and redis.zcard("retry") == 0 and redis.zcard("dead") == 0
    assert all(redis.llen(key) == 0 for key in redis.keys("jobsapp:inflight:*") if redis.type(key) in (b"list", "list"))
    print(f"tracked cancel of {JOBS} jobs on {connection.vendor}: {counts}, {outcome}")  # the figure reported
