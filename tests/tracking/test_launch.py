"""Task.objects.launch: rows in bulk, jobs pushed after commit under the recorded jids."""

from __future__ import annotations

import json
import math

import pytest
from django.db import connection, transaction

from jobsapp import middleware
from tests.tracking.conftest import pop_item, run_item
from tests.tracking.jobs import Crashes, Succeeds
from tracking.models import Event, Task


def queued_items(redis, queue: str = "default") -> list[dict]:
    return [json.loads(raw) for raw in reversed(redis.lrange(f"queue:{queue}", 0, -1))]


@pytest.mark.django_db(transaction=True)
def test_jobs_reach_redis_only_after_the_rows_are_committed(redis):
    # Given an open transaction, When a task of 30 jobs is launched inside it
    with transaction.atomic():
        task = Task.objects.launch(Succeeds, [[index] for index in range(30)], name="thirty")
        # Then nothing is in Redis yet
        assert redis.llen("queue:default") == 0
        assert Event.objects.filter(task=task).count() == 30
    # And after the commit every job is there, in order, under the jid of its event
    items = queued_items(redis)
    assert [item["args"] for item in items] == [[index] for index in range(30)]
    events = {row.job_id: row for row in Event.objects.filter(task=task)}
    assert {item["jid"] for item in items} == set(events)
    for item in items:
        assert events[item["jid"]].params == {"args": item["args"]}
        assert item["task_id"] == task.pk and item["use_task_event"] is True
    task.refresh_from_db()
    assert (task.name, task.total, task.counts["enqueue"], task.status) == ("thirty", 30, 30, "pending")


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_launch_pushes_nothing(redis):
    with pytest.raises(RuntimeError), transaction.atomic():
        Task.objects.launch(Succeeds, [[1], [2]])
        raise RuntimeError("the view failed after launching")
    assert redis.llen("queue:default") == 0 and not Task.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_launching_thousands_costs_a_handful_of_queries(redis, django_assert_max_num_queries, settings):
    settings.TRACKING = {"LAUNCH_BATCH_SIZE": 1000, "LAUNCH_INLINE_JOBS": 3000}  # written inline, not fanned out
    # Rows per INSERT are capped by the backend too: SQLite under Django 5.2 assumes the old
    # 999-parameter limit (76 events an INSERT: 40 INSERTs), Django 6 reads the real one (1,000
    # an INSERT: 3). Either way the count follows the batches, never the jobs.
    rows_per_insert = min(1000, connection.ops.bulk_batch_size(Event._meta.concrete_fields, list(range(3000))))
    # (one more with the transactional outbox on, the default: its entry, one INSERT for the whole task)
    with django_assert_max_num_queries(6 + math.ceil(3000 / rows_per_insert)):
        task = Task.objects.launch(Succeeds, [[index] for index in range(3000)])
    assert redis.llen("queue:default") == 3000
    assert Event.objects.filter(task=task, status="enqueue").count() == 3000


@pytest.mark.django_db(transaction=True)
def test_launched_jobs_run_to_a_finished_task(redis, django_user_model):
    owner = django_user_model.objects.create_user("ann")
    task = Task.objects.launch(Succeeds, [[1], [2], [3]], owner=owner)
    for _ in range(3):
        run_item(pop_item(redis))
    task.refresh_from_db()
    assert task.owner == owner and task.status == "finished" and task.counts["finish"] == 3 and task.progress == 1.0


@pytest.mark.django_db(transaction=True)
def test_a_follow_up_job_runs_once_every_other_job_settled(redis):
    # Given a task with a follow-up step
    task = Task.objects.launch(Succeeds, [[1], [2]], then=Succeeds, then_args=["assemble"])
    run_item(pop_item(redis))
    assert redis.llen("queue:default") == 1
    # When the last job settles (a failure counts as settled)
    with pytest.raises(ZeroDivisionError):
        run_item({**pop_item(redis), "class": Crashes.wire_name()})
    middleware.notify(
        "on_dead",
        Crashes,
        {"use_task_event": True, "jid": Event.objects.get(task=task, status="error").job_id},
        ZeroDivisionError(),
        reason="retries_exhausted",
    )
    # Then the follow-up job is added to the task and pushed, and the task is not finished yet
    task.refresh_from_db()
    assert (task.total, task.then_queued, task.finished_at) == (3, True, None)
    follow_up = pop_item(redis)
    assert follow_up["args"] == ["assemble"] and Event.objects.get(job_id=follow_up["jid"]).task_id == task.pk
    # When it finishes, the task finishes
    run_item(follow_up)
    task.refresh_from_db()
    assert task.status == "finished" and task.counts == {
        "enqueue": 0,
        "working": 0,
        "finish": 2,
        "failed": 0,
        "error": 1,
        "cancelled": 0,
    }
    assert redis.llen("queue:default") == 0


@pytest.mark.django_db(transaction=True)
def test_a_job_stopped_by_another_client_middleware_is_settled(redis):
    class DropEven(middleware.ClientMiddleware):
        def call(self, job_class, item, queue, redis):
            return None if item["args"][0] % 2 == 0 else item

    middleware.client_chain().add(DropEven)
    task = Task.objects.launch(Succeeds, [[1], [2], [3], [4]])
    assert [item["args"] for item in queued_items(redis)] == [[1], [3]]
    dropped = Event.objects.filter(task=task, status="error", is_final=True)
    assert sorted(row.params["args"][0] for row in dropped) == [2, 4]
    task.refresh_from_db()
    assert task.counts["error"] == 2 and task.counts["enqueue"] == 2


@pytest.mark.django_db(transaction=True)
def test_an_empty_launch_is_finished_at_once():
    task = Task.objects.launch(Succeeds, [])
    assert task.status == "finished" and task.progress == 1.0


@pytest.mark.django_db(transaction=True)
def test_arguments_must_be_json_native_and_nothing_is_written_otherwise(redis):
    with pytest.raises(TypeError):
        Task.objects.launch(Succeeds, [[object()]])
    assert not Task.objects.exists() and redis.llen("queue:default") == 0


BACKGROUND = {"LAUNCH_INLINE_JOBS": 2, "LAUNCH_CHUNK_JOBS": 2}


@pytest.mark.django_db(transaction=True)
def test_a_big_task_returns_at_once_as_launching_and_its_chunks_write_and_push_the_jobs(redis, settings):
    # Given tasks above LAUNCH_INLINE_JOBS are fanned out, two jobs a chunk
    settings.TRACKING = BACKGROUND
    # When a task of five jobs is launched
    task = Task.objects.launch(Succeeds, [[index] for index in range(5)], name="five")
    # Then the caller gets the task row alone: launching, every job counted as waiting
    assert (task.status, task.total, task.counts["enqueue"]) == ("launching", 5, 5)
    assert not Event.objects.filter(task=task).exists()
    chunks = queued_items(redis)
    assert [item["class"] for item in chunks] == ["tracking.jobs.LaunchChunk"] * 3
    # When workers run the chunks
    for _ in range(3):
        run_item(pop_item(redis))
    # Then every event is written and every job pushed under its event's jid, in order
    task.refresh_from_db()
    assert (task.status, task.launching, task.counts["enqueue"]) == ("pending", 0, 5)
    items = queued_items(redis)
    assert [item["args"] for item in items] == [[index] for index in range(5)]
    events = dict(Event.objects.filter(task=task).values_list("job_id", "params"))
    assert {item["jid"]: {"args": item["args"]} for item in items} == events
    # And the jobs run to a finished task
    for _ in range(5):
        run_item(pop_item(redis))
    task.refresh_from_db()
    assert (task.status, task.counts["finish"]) == ("finished", 5)


@pytest.mark.django_db(transaction=True)
def test_a_chunk_run_twice_writes_its_events_once_and_pushes_its_jobs_again(redis, settings):
    # Given a fanned-out task whose first chunk ran, then was delivered again (its worker died
    # before acknowledging it, perhaps before pushing its jobs)
    settings.TRACKING = BACKGROUND
    task = Task.objects.launch(Succeeds, [[1], [2], [3]])
    first_chunk = pop_item(redis)
    run_item(first_chunk)
    pushed_once = [item["jid"] for item in queued_items(redis) if item["class"] == Succeeds.wire_name()]
    # When it runs again
    run_item(first_chunk)
    # Then its events were written once and the task's launching count moved once
    task.refresh_from_db()
    assert Event.objects.filter(task=task).count() == 2 and task.launching == 1 and task.status == "launching"
    # And its jobs are pushed again under the same jids (at-least-once: none lost)
    pushed = [item["jid"] for item in queued_items(redis) if item["class"] == Succeeds.wire_name()]
    assert pushed == pushed_once * 2
    # And once the last chunk ran, running every pushed copy finishes the task with exact counts
    run_item(next(item for item in queued_items(redis) if item["class"] == "tracking.jobs.LaunchChunk"))
    redis.lrem("queue:default", 0, redis.lindex("queue:default", -1))  # the chunk just run
    while redis.llen("queue:default"):
        run_item(pop_item(redis))
    task.refresh_from_db()
    assert (task.status, task.total, task.counts["finish"], task.counts["enqueue"]) == ("finished", 3, 3, 0)


@pytest.mark.django_db(transaction=True)
def test_a_big_launch_rolled_back_pushes_nothing(redis, settings):
    settings.TRACKING = BACKGROUND
    with pytest.raises(RuntimeError), transaction.atomic():
        Task.objects.launch(Succeeds, [[1], [2], [3]])
        raise RuntimeError("the view failed after launching")
    assert redis.llen("queue:default") == 0 and not Task.objects.exists()


DEAD_REDIS = "redis://127.0.0.1:1/0"


def redis_at(settings, url: str) -> None:
    from jobsapp import connection as jobs_connection

    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": url}
    jobs_connection.reset()


@pytest.mark.django_db(transaction=True)
def test_a_big_launch_with_redis_down_settles_its_jobs_as_dead_errors(redis, settings):
    from jobsapp import RedisUnavailable

    # Given the outbox off, and Redis down
    settings.TRACKING = BACKGROUND
    settings.JOBSAPP = {**settings.JOBSAPP, "OUTBOX": False}
    redis_at(settings, DEAD_REDIS)
    # When a big task is launched
    with pytest.raises(RedisUnavailable):
        Task.objects.launch(Succeeds, [[1], [2], [3]])
    # Then the task is finished, each of its jobs a dead error that says why
    task = Task.objects.get()
    assert (task.status, task.launching, task.counts["error"]) == ("finished", 0, 3)
    assert all("could not be enqueued" in messages[-1]["message"] for messages in Event.objects.values_list("messages", flat=True))


@pytest.mark.django_db(transaction=True)
def test_with_the_outbox_a_big_launch_survives_redis_down_at_commit(redis, redis_server, settings):
    from jobsapp import outbox

    # Given the outbox on, and Redis down when the launching transaction commits
    settings.TRACKING = BACKGROUND
    settings.JOBSAPP = {**settings.JOBSAPP, "OUTBOX": True}
    outbox.forget_tables()
    redis_at(settings, DEAD_REDIS)
    with transaction.atomic():
        task = Task.objects.launch(Succeeds, [[1], [2], [3]])
    # Then nothing is lost: the task waits, launching, its chunks in the outbox
    task.refresh_from_db()
    assert task.status == "launching" and not Event.objects.exists()
    # When Redis is back and the relay runs
    redis_at(settings, redis_server.url)
    outbox.relay_due(grace_seconds=0)
    # Then the chunks are queued, and running them launches every job
    while redis.llen("queue:default"):
        run_item(pop_item(redis))
    task.refresh_from_db()
    assert (task.status, task.counts["finish"]) == ("finished", 3)
    outbox.forget_tables()
