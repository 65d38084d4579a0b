"""Counts in counter shards and the recording thread: exact under concurrency and duplicates,
final statuses committed before a job returns, and a summary that stays one query."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from tests.tracking.conftest import run_item
from tests.tracking.jobs import Succeeds
from tracking import launching, recorder, transitions
from tracking.models import Event, Task, TaskCounter
from tracking.writer import get_writer


def queued_items(redis, queue: str = "default") -> list[dict]:
    return [json.loads(raw) for raw in reversed(redis.lrange(f"queue:{queue}", 0, -1))]


def statuses_of(task: Task) -> dict[str, int]:
    seen = Counter(Event.objects.filter(task=task).values_list("status", flat=True))
    return {status: seen.get(status, 0) for status in ("enqueue", "working", "finish", "failed", "error", "cancelled")}


def in_threads(items: list[dict], run: Callable[[dict], object], threads: int = 10) -> list[BaseException]:
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            while True:
                with lock:
                    if not items:
                        return
                    item = items.pop()
                run(item)
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return errors


def run_in_own_transaction(item: dict) -> None:
    """A thread that records inline, in its own transaction and its own counter shard."""
    with transaction.atomic():
        run_item(item)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("runner", [run_item, run_in_own_transaction], ids=["through-the-writer", "inline-many-shards"])
def test_ten_threads_running_every_job_twice_keep_exact_counts(redis, runner, settings):
    # Given 150 jobs of one task, each delivered twice, and a crash-and-retry on some first runs
    settings.TRACKING = {"COUNTER_SHARDS": 4}
    task = Task.objects.launch(Succeeds, [[index] for index in range(150)])
    items = queued_items(redis)
    retried = {item["jid"] for item in items[:20]}
    for jid in retried:
        launching.record(jid, transitions.START)
        launching.record(jid, transitions.CRASHED, message="boom")
        launching.record(jid, transitions.RETRY_SCHEDULED, message="waiting for retry (1 of 25)")
    # When 10 threads run every copy at once
    errors = in_threads(items * 2, runner)
    # Then each job counts once, the counts equal the events' statuses, and the task finished once
    assert errors == []
    task.refresh_from_db()
    assert task.counts == statuses_of(task) == {"enqueue": 0, "working": 0, "finish": 150, "failed": 0, "error": 0, "cancelled": 0}
    assert task.settled_count == 150 and task.status == "finished" and task.finished_at is not None
    assert all(attempts >= 2 for attempts in Event.objects.filter(job_id__in=retried).values_list("attempts", flat=True))
    shards = set(TaskCounter.objects.filter(task=task).values_list("shard", flat=True))
    assert 0 in shards and shards <= set(range(4))
    if runner is run_in_own_transaction:
        assert len(shards) > 2  # the counts really were spread over several shards


@pytest.mark.django_db(transaction=True)
def test_final_status_is_committed_when_the_job_returns(redis):
    # Given a tracked job run by a processor thread (no transaction of its own: the writer path)
    task = Task.objects.launch(Succeeds, [["a"]])
    item = queued_items(redis)[0]
    seen: dict[str, object] = {}

    def processor_thread() -> None:
        run_item(item)
        # When it returns (the engine acknowledges it next), a fresh connection sees it final
        seen["status"] = Event.objects.get(job_id=item["jid"]).status
        seen["in_atomic_block"] = connection.in_atomic_block
        connection.close()

    thread = threading.Thread(target=processor_thread)
    thread.start()
    thread.join()
    assert seen == {"status": "finish", "in_atomic_block": False}
    assert get_writer().batches >= 1  # it went through the recording thread
    task.refresh_from_db()
    assert task.status == "finished" and task.counts["finish"] == 1


@pytest.mark.django_db(transaction=True)
def test_working_and_the_final_status_of_a_short_job_can_share_one_write():
    # Given a job whose start and finish are applied in one batch
    task = Task.objects.launch(Succeeds, [["quick"]])
    job_id = Event.objects.get(task=task).job_id
    now = timezone.now()
    results = launching.apply([transitions.Change(job_id, transitions.START, now), transitions.Change(job_id, transitions.FINISHED, now)])
    # Then both applied, the event went straight to finish with one attempt, and counts match
    assert results == [True, True]
    row = Event.objects.get(job_id=job_id)
    assert (row.status, row.attempts, row.revision) == ("finish", 1, 2)
    task.refresh_from_db()
    assert task.counts == statuses_of(task) and task.status == "finished" and task.started_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_duplicate_finishes_a_task_whose_finish_check_was_lost(redis):
    # Given a task whose last event settled, but the process died before its finish check
    task = Task.objects.launch(Succeeds, [["last"]])
    item = queued_items(redis)[0]
    run_item(item)
    Task.objects.filter(pk=task.pk).update(finished_at=None)
    # When the job runs again (its ack never reached Redis)
    run_item(item)
    # Then the duplicate changes no count and finishes the task
    task.refresh_from_db()
    assert task.status == "finished" and task.counts["finish"] == 1 and task.settled_count == 1


@pytest.mark.django_db
def test_summary_stays_one_query_as_events_and_shards_grow(django_user_model, django_assert_num_queries, settings):
    from rest_framework.test import APIClient

    settings.TRACKING = {"LAUNCH_INLINE_JOBS": 3000}  # the events written inline

    owner = django_user_model.objects.create_user("ann")
    api = APIClient()
    api.force_authenticate(owner)
    task = Task.objects.launch(Succeeds, [[index] for index in range(3000)], owner=owner)
    job_ids = list(Event.objects.filter(task=task).order_by("id").values_list("job_id", flat=True))
    now = timezone.now()
    etags = []
    for round_number, shard in enumerate((1, 2, 3, 5, 8)):
        # When more events change, each batch counted in another shard
        batch = job_ids[round_number * 500 : (round_number + 1) * 500]
        launching.apply([transitions.Change(job_id, transitions.FINISHED, now) for job_id in batch], shard=shard)
        # Then the summary is still one query, and right
        with django_assert_num_queries(1):
            response = api.get(f"/api/tasks/{task.pk}/")
        assert response.json()["counts"]["finish"] == (round_number + 1) * 500
        assert response.json()["counts"]["enqueue"] == 3000 - (round_number + 1) * 500
        etags.append(response["ETag"])
    assert len(set(etags)) == len(etags)
    assert TaskCounter.objects.filter(task=task).count() == 6


@pytest.mark.django_db
def test_an_event_keeps_its_first_and_newest_messages_only():
    from tracking import launching, transitions
    from tracking.models import Event, Task

    # Given a job that reports progress far more often than anyone reads it
    task = Task.objects.launch(Succeeds, [[1]], name="chatty")
    job_id = Event.objects.get(task=task).job_id
    launching.record(job_id, transitions.START)
    for number in range(transitions.MAX_MESSAGES + 50):
        launching.record(job_id, transitions.MESSAGES_ONLY, message=f"row {number}")
    # Then the event holds at most MAX_MESSAGES: how it started, and the newest progress
    messages = Event.objects.get(job_id=job_id).messages
    assert len(messages) == transitions.MAX_MESSAGES
    assert messages[0]["status"] == "working" and messages[-1]["message"] == f"row {transitions.MAX_MESSAGES + 49}"


postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="recorder.write_committed is PostgreSQL's path")


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_committed_batch_applies_each_transition_once_and_keeps_messages(redis):
    # Given two jobs of a task, one with a progress message recorded already
    task = Task.objects.launch(Succeeds, [["a"], ["b"]])
    first, second = Event.objects.filter(task=task).order_by("id").values_list("job_id", flat=True)
    now = timezone.now()
    launching.apply(
        [transitions.Change(first, transitions.START, now), transitions.Change(first, transitions.MESSAGES_ONLY, now, message="row 1")]
    )
    # When one batch (outside any transaction: the recording thread's path) finishes the first
    # twice and the second once, then moves the first back to working
    assert recorder.can_write_committed()
    batch = [
        transitions.Change(first, transitions.FINISHED, now, message="done"),
        transitions.Change(first, transitions.FINISHED, now),
        transitions.Change(second, transitions.START, now),
        transitions.Change(second, transitions.FINISHED, now),
        transitions.Change(first, transitions.START, now),
    ]
    committed = recorder.write_committed(batch, 3)
    # Then only the allowed transitions applied, counts match the events, the messages kept the
    # earlier one, and the task found complete after the commit is left to finish (unlocked)
    assert committed is not None and committed.results == [True, False, True, True, False]
    assert [task_progress.task_id for task_progress in committed.complete] == [task.pk]
    row = Event.objects.get(job_id=first)
    assert row.status == "finish" and [entry["message"] for entry in row.messages] == ["row 1", "done"]
    task.refresh_from_db()
    assert task.counts == statuses_of(task) == {"enqueue": 0, "working": 0, "finish": 2, "failed": 0, "error": 0, "cancelled": 0}
    assert task.settled_count == 2 and task.started_at is not None and task.finished_at is None
    # And the same batch again changes nothing; through apply, the task is finished
    assert launching.apply(batch, shard=3) == [False] * 5
    task.refresh_from_db()
    assert task.settled_count == 2 and task.counts["finish"] == 2 and task.status == "finished"


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_committed_batch_leaves_a_missing_event_to_the_slower_path(redis):
    # Given a tracked job pushed without the client middleware: no event yet
    item = {"class": Succeeds.wire_name(), "args": ["x"], "jid": "a1b2c3d4e5f6a1b2c3d4e5f6", "queue": "default", "use_task_event": True}
    change = transitions.Change(item["jid"], transitions.START, timezone.now(), item=item)
    # When the committed path meets it, it writes nothing; apply then records it the slower way
    assert recorder.write_committed([change], 1) is None
    assert not Event.objects.filter(job_id=item["jid"]).exists()
    assert launching.apply([change]) == [True]
    event = Event.objects.get(job_id=item["jid"])
    assert event.status == "working" and event.task.counts["working"] == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_a_forked_child_gets_a_writer_of_its_own():
    # Given the parent's writer (runworkers -P forks its worker processes after setup)
    parent = get_writer()
    read, write = os.pipe()
    # When a child process asks for its writer
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once
        child = get_writer()
        os.write(write, b"ok" if child is not parent and child.pid == os.getpid() and get_writer() is child else b"shared")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    # Then it is a new one, for the child's pid (the parent's thread does not exist there)
    assert answer == b"ok"
    assert get_writer() is parent
