"""Task.objects.launch through the engine's transactional outbox: a task whose rows committed
while Redis was down is not lost, and nothing raises into the launching code; the relay pushes
its jobs later under the jids its events recorded."""

from __future__ import annotations

import json

import pytest

from jobsapp import connection as jobs_connection
from jobsapp import outbox
from jobsapp.models import OutboxEntry
from tests.tracking.conftest import pop_item, run_item
from tests.tracking.jobs import Succeeds
from tracking.models import Event, Task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _outbox_on(settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "OUTBOX": True}
    outbox.forget_tables()


def test_a_task_launched_while_redis_is_down_is_pushed_by_the_relay_under_its_recorded_jids(redis, settings):
    # Given Redis down when the launch commits
    working = settings.JOBSAPP["REDIS_URL"]
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": "redis://127.0.0.1:1/0"}
    jobs_connection.reset()
    task = Task.objects.launch(Succeeds, [[1], [2], [3]], name="during an outage")
    # Then the launch returned normally, its events wait as enqueue, and one outbox entry holds its jobs
    assert Event.objects.filter(task=task, status="enqueue").count() == 3
    assert OutboxEntry.objects.count() == 1
    # When Redis is back and the relay runs
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": working}
    jobs_connection.reset()
    assert outbox.relay_due(grace_seconds=0).pushed == 1
    # Then every job is in Redis once, under the jid its event recorded, and the task finishes
    items = [json.loads(raw) for raw in redis.lrange("queue:default", 0, -1)]
    assert sorted(item["jid"] for item in items) == sorted(Event.objects.filter(task=task).values_list("job_id", flat=True))
    for _ in range(3):
        run_item(pop_item(redis))
    task.refresh_from_db()
    assert task.status == "finished" and task.counts["finish"] == 3
    assert OutboxEntry.objects.count() == 0


def test_a_launch_pushes_at_commit_and_its_entry_is_cleaned_by_the_relay(redis):
    task = Task.objects.launch(Succeeds, [[1], [2]])
    assert redis.llen("queue:default") == 2
    done = outbox.relay_due(grace_seconds=0)
    assert (done.cleaned, done.pushed) == (1, 0)
    assert redis.llen("queue:default") == 2 and OutboxEntry.objects.count() == 0
    assert Event.objects.filter(task=task, status="enqueue").count() == 2
