"""Recording: every event transition through the real middleware chains, the real Redis and DB.

Jobs are pushed with the engine's client (client middleware), taken from Redis and run through
the server chain in-process; the engine's decisions are delivered with ``middleware.notify``, as
the processor does.
"""

from __future__ import annotations

import pytest

from jobsapp import api, keys, middleware
from jobsapp.connection import get_redis
from jobsapp.errors import UnknownJobClass
from jobsapp.worker import processor
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.retry import RetryPolicy
from tests.tracking.jobs import AsyncReports, Crashes, FailsOnPurpose, PlainTracked, Reports, ReportsThenWaits, Succeeds, Untracked
from tracking import BusinessFailure, NormalException
from tracking.models import Event, Task

pytestmark = pytest.mark.django_db


def counts(task_id: str) -> dict[str, int]:
    return Task.objects.get(pk=task_id).counts


def event(jid: str) -> Event:
    return Event.objects.get(job_id=jid)


def statuses(jid: str) -> list[str]:
    return [entry["status"] for entry in event(jid).messages]


def test_untracked_job_costs_no_query(pop, run_job, django_assert_num_queries):
    # Given a job without use_task_event, When it is pushed and run
    with django_assert_num_queries(0):
        Untracked.perform_async(1)
        result = run_job(pop())
    # Then nothing was recorded
    assert result == "untracked"
    assert not Task.objects.exists() and not Event.objects.exists()


def test_business_failure_is_a_no_retry_error_with_the_documents_alias():
    from jobsapp import NoRetryError

    assert issubclass(BusinessFailure, NoRetryError)
    assert NormalException is BusinessFailure


def test_push_records_enqueue_with_a_task_of_its_own(pop):
    # When a tracked job is pushed on its own
    jid = PlainTracked.perform_async(6, scale=7)
    # Then its event is enqueue, in a one-job task, and the payload names the task
    row = event(jid)
    assert row.status == "enqueue" and not row.is_final and row.attempts == 0
    assert row.params == {"args": [6], "kwargs": {"scale": 7}}
    assert row.job_class == PlainTracked.wire_name() and row.queue == "reports"
    task = row.task
    assert task.total == 1 and task.counts == {"enqueue": 1, "working": 0, "finish": 0, "failed": 0, "error": 0, "cancelled": 0}
    assert task.status == "pending"
    assert pop("reports")["task_id"] == task.pk


def test_success_goes_enqueue_working_finish_and_finishes_the_task(pop, run_job):
    jid = Succeeds.perform_async("a")
    item = pop()
    # When the job runs and returns
    assert run_job(item) == "a"
    # Then the event is final finish, with the job's message, and the task is finished
    row = event(jid)
    assert (row.status, row.is_final, row.attempts) == ("finish", True, 1)
    assert [entry["message"] for entry in row.messages] == ["working on a"]
    assert row.messages[0]["status"] == "working" and "T" in row.messages[0]["at"]
    task = row.task
    assert task.counts["finish"] == 1 and task.counts["enqueue"] == 0
    assert task.status == "finished" and task.finished_at is not None and task.progress == 1.0


def test_working_is_recorded_while_the_job_runs(pop):
    from tests.tracking.conftest import run_item

    seen = {}

    class Peek(middleware.ServerMiddleware):
        def call(self, job, item, queue, call_next):
            seen["status"] = Event.objects.get(job_id=item["jid"]).status
            seen["task"] = Task.objects.get(pk=item["task_id"]).status
            return call_next()

    middleware.server_chain().add(Peek)
    jid = Succeeds.perform_async("b")
    run_item(pop())
    assert seen == {"status": "working", "task": "running"}
    assert event(jid).status == "finish"


def test_business_failure_records_failed_with_its_message_and_no_retry(pop, run_job):
    jid = FailsOnPurpose.perform_async("seller not qualified")
    item = pop()
    # When the job raises the business failure
    with pytest.raises(BusinessFailure):
        run_job(item)
    # Then the event is final failed with the message
    row = event(jid)
    assert (row.status, row.is_final) == ("failed", True)
    assert row.messages[-1]["message"] == "seller not qualified" and row.messages[-1]["status"] == "failed"
    # And the engine's on_dead(no_retry) that follows changes nothing
    middleware.notify("on_dead", FailsOnPurpose, item, BusinessFailure("seller not qualified"), reason="no_retry")
    assert event(jid).messages == row.messages
    assert counts(row.task_id)["failed"] == 1 and Task.objects.get(pk=row.task_id).status == "finished"


def test_crash_then_retry_goes_back_to_enqueue_and_can_finish_later(pop, run_job):
    jid = Crashes.perform_async(1)
    item = pop()
    # When the job crashes
    with pytest.raises(ZeroDivisionError):
        run_job(item)
    # Then the event is error (not final), the task still running
    row = event(jid)
    assert (row.status, row.is_final) == ("error", False)
    assert row.messages[-1]["message"] == "ZeroDivisionError: division by zero"
    assert Task.objects.get(pk=row.task_id).status == "running"
    # When the engine schedules a retry
    middleware.notify("on_retry", Crashes, item, ZeroDivisionError(), retry_count=0, retry_limit=25, run_at=0.0)
    # Then the event is back to enqueue with "waiting for retry (1 of 25)"
    row = event(jid)
    assert row.status == "enqueue" and row.messages[-1] == {
        **row.messages[-1],
        "status": "enqueue",
        "message": "waiting for retry (1 of 25)",
    }
    assert counts(row.task_id) == {"enqueue": 1, "working": 0, "finish": 0, "failed": 0, "error": 0, "cancelled": 0}
    # When the retry runs (same jid) and succeeds this time
    item_again = {**item, "class": Succeeds.wire_name(), "args": ["ok"]}
    run_job(item_again)
    row = event(jid)
    assert (row.status, row.attempts) == ("finish", 2)
    assert statuses(jid) == ["error", "enqueue", "working"]
    assert counts(row.task_id)["finish"] == 1 and Task.objects.get(pk=row.task_id).finished_at is not None


def test_retries_exhausted_stays_error_and_is_final(pop, run_job):
    jid = Crashes.perform_async(1)
    item = pop()
    with pytest.raises(ZeroDivisionError):
        run_job(item)
    # When the engine gives up
    middleware.notify("on_dead", Crashes, item, ZeroDivisionError("division by zero"), reason="retries_exhausted")
    # Then the event is a final error and the task finished with one error
    row = event(jid)
    assert (row.status, row.is_final) == ("error", True)
    assert row.messages[-1]["message"] == "retries exhausted"
    task = Task.objects.get(pk=row.task_id)
    assert task.counts["error"] == 1 and task.status == "finished" and task.progress == 1.0


def test_a_late_duplicate_never_moves_a_final_event_back_nor_counts_twice(pop, run_job):
    jid = Succeeds.perform_async("x")
    item = pop()
    run_job(item)
    before = event(jid)
    task_before = Task.objects.get(pk=before.task_id)
    # When a duplicate copy of the job runs again, crashes, and the engine reports retry and requeue
    run_job(item)
    with pytest.raises(ZeroDivisionError):
        run_job({**item, "class": Crashes.wire_name(), "args": [1]})
    middleware.notify("on_retry", Crashes, item, ZeroDivisionError(), retry_count=0, retry_limit=25, run_at=0.0)
    middleware.notify("on_requeue", item, reason="shutdown")
    middleware.notify("on_dead", Crashes, item, ZeroDivisionError(), reason="retries_exhausted")
    # Then nothing changed
    after = event(jid)
    assert (after.status, after.is_final, after.attempts, after.revision) == ("finish", True, 1, before.revision)
    task_after = Task.objects.get(pk=before.task_id)
    assert task_after.counts == task_before.counts and task_after.revision == task_before.revision


def test_a_duplicate_running_concurrently_is_not_counted_twice(pop, run_job):
    jid = Succeeds.perform_async("y")
    item = pop()
    from tracking import launching, transitions

    # Given a copy already working (a recovered orphan still running somewhere)
    assert launching.record(jid, transitions.START)
    # When the second copy runs to the end
    run_job(item)
    # Then the task counts one finished job and nothing working
    row = event(jid)
    assert row.status == "finish" and row.attempts == 2
    assert counts(row.task_id) == {"enqueue": 0, "working": 0, "finish": 1, "failed": 0, "error": 0, "cancelled": 0}


def test_requeue_at_shutdown_goes_back_to_enqueue(pop):
    from tracking import launching, transitions

    jid = Succeeds.perform_async("z")
    item = pop()
    launching.record(jid, transitions.START)
    middleware.notify("on_requeue", item, reason="shutdown")
    row = event(jid)
    assert row.status == "enqueue" and row.messages[-1]["message"] == "requeued unfinished (shutdown)"
    assert counts(row.task_id)["working"] == 0 and counts(row.task_id)["enqueue"] == 1


@pytest.mark.parametrize(
    ("reason", "text"),
    [("unknown_class", "not run: unknown job class"), ("poison", "not run again"), ("malformed", "malformed")],
)
def test_a_job_that_never_ran_and_died_is_a_final_error(pop, reason, text):
    jid = Succeeds.perform_async("never")
    item = pop()
    middleware.notify("on_dead", None, item, UnknownJobClass("'X' is not a registered job class"), reason=reason)
    row = event(jid)
    assert (row.status, row.is_final) == ("error", True)
    assert text in row.messages[-1]["message"]
    assert Task.objects.get(pk=row.task_id).status == "finished"


def test_retry_disabled_crash_is_final_error(pop, run_job):
    jid = Crashes.perform_async(1)
    item = pop()
    with pytest.raises(ZeroDivisionError):
        run_job(item)
    middleware.notify("on_dead", Crashes, item, ZeroDivisionError(), reason="retry_disabled")
    row = event(jid)
    assert (row.status, row.is_final) == ("error", True)
    assert [entry["status"] for entry in row.messages] == ["error", "error"]


def test_progress_messages_are_batched(pop, run_job, settings, django_assert_max_num_queries):
    # Given a long flush interval, When a job reports 500 rows
    settings.TRACKING = {"MESSAGE_FLUSH_INTERVAL_SECONDS": 3600}
    jid = Reports.perform_async(500)
    item = pop()
    with django_assert_max_num_queries(16):  # start, then the end with every message, and the finish
        run_job(item)
    # Then the messages are written with the final status: the first and the newest ones, in order
    from tracking.transitions import MAX_MESSAGES

    row = event(jid)
    assert len(row.messages) == MAX_MESSAGES and row.status == "finish"
    assert row.messages[0]["message"] == "row 1 of 500" and row.messages[-1]["message"] == "row 500 of 500"
    assert row.messages[1]["message"] == f"row {500 - MAX_MESSAGES + 2} of 500"


def test_progress_messages_flush_while_running(pop, run_job, settings):
    from tests.tracking.conftest import run_item

    settings.TRACKING = {"MESSAGE_FLUSH_INTERVAL_SECONDS": 0}
    seen = []

    class Snoop(middleware.ServerMiddleware):
        def call(self, job, item, queue, call_next):
            original = job.add_message

            def add_message(message):
                original(message)
                seen.append(len(Event.objects.get(job_id=item["jid"]).messages))

            job.add_message = add_message
            return call_next()

    middleware.server_chain().add(Snoop)
    Reports.perform_async(3)
    run_item(pop())
    assert seen == [1, 2, 3]


@pytest.mark.django_db(transaction=True)  # the job's thread records through the recording thread, as a worker's does
def test_a_message_before_a_long_step_is_written_while_the_step_runs(pop, settings):
    import threading

    from django.db import connection

    from tests.manual_clock import REAL_SECONDS_LIMIT
    from tests.tracking.conftest import run_item
    from tests.workers import wait_until

    # Given messages flushed at most every 0.3 s, and a job that reports "step 1 of 4", then
    # blocks in a long step until released
    settings.TRACKING = {"MESSAGE_FLUSH_INTERVAL_SECONDS": 0.3}
    ReportsThenWaits.release.clear()
    jid = ReportsThenWaits.perform_async(REAL_SECONDS_LIMIT)
    item = pop()

    def run() -> None:
        try:
            run_item(item)
        finally:
            connection.close()  # this thread's own connection: the test database is dropped after the run

    performing = threading.Thread(target=run)
    # When it runs in a processor-like thread (no further message, no end yet)
    performing.start()
    try:
        # Then its message reaches the database while the job still runs
        wait_until(lambda: "step 1 of 4" in [entry["message"] for entry in event(jid).messages], timeout_seconds=10, message="step 1 shown")
        assert performing.is_alive() and event(jid).status == "working"
    finally:
        ReportsThenWaits.release.set()
        performing.join(REAL_SECONDS_LIMIT)
    # And once released it finishes, the message written once
    row = event(jid)
    assert row.status == "finish" and [entry["message"] for entry in row.messages].count("step 1 of 4") == 1


def test_missing_event_is_created_by_the_worker(pop, run_job):
    # Given a tracked job pushed without the client middleware (Ruby, or tracking installed later)
    middleware.client_chain().clear()
    jid = Succeeds.perform_async("late")
    assert not Event.objects.exists()
    # When it runs
    run_job(pop())
    # Then it is recorded from enqueue to finish
    row = event(jid)
    assert row.status == "finish" and row.task.counts["finish"] == 1 and row.task.total == 1


def test_joining_an_existing_task_with_task_id_reopens_it(pop, run_job):
    jid = Succeeds.perform_async("first")
    run_job(pop())
    task = event(jid).task
    assert task.status == "finished"
    second = Succeeds.set(task_id=task.pk).perform_async("second")
    task.refresh_from_db()
    assert task.total == 2 and task.finished_at is None and event(second).task_id == task.pk
    run_job(pop())
    task.refresh_from_db()
    assert task.status == "finished" and task.counts["finish"] == 2


def test_pushing_the_same_jid_twice_records_once(pop):
    from jobsapp import client

    item = {"class": Succeeds.wire_name(), "args": ["same"], "use_task_event": True, "jid": "ab" * 12}
    client.push(item)
    task_id = event("ab" * 12).task_id
    client.push({**item, "task_id": task_id})
    assert Event.objects.count() == 1 and Task.objects.get(pk=task_id).total == 1


def test_an_async_job_reports_progress_from_its_event_loop_when_tracking_writes_inline(pop, settings):
    from jobsapp import registry
    from jobsapp.middleware import run_server_chain
    from jobsapp.worker import aio

    # Given tracking writing inline (BATCH_WRITES off) and messages due at once: a database call
    # from an async job's event loop raised SynchronousOnlyOperation and failed the job every time
    settings.TRACKING = {**getattr(settings, "TRACKING", {}), "MESSAGE_FLUSH_INTERVAL_SECONDS": 0, "BATCH_WRITES": False}
    jid = AsyncReports.perform_async(3)
    item = pop()
    job = registry.lookup(item["class"])()
    job.jid, job.item, job.queue = jid, item, item["queue"]
    # When it runs through the server chain, its perform awaited on an event loop as the lane does
    run_server_chain(job, item, item["queue"], lambda: aio.perform(lambda: job.perform(3)))
    # Then it finishes with every progress message, written with its final status
    row = event(jid)
    assert row.status == "finish", row.messages
    working = [entry["message"] for entry in row.messages if entry["status"] == "working"]
    assert working[-3:] == ["row 1 of 3", "row 2 of 3", "row 3 of 3"], row.messages


def test_a_tracked_job_an_operator_deletes_ends_its_event_and_its_task(redis):
    # Given a tracked job waiting in its queue, in a task of its own
    jid = PlainTracked.perform_async(6, scale=7)
    # When an operator deletes it (the dashboard and the jobs command act through jobsapp.api)
    assert api.Queue("reports").delete_job(jid)
    # Then its event is a final error saying why, and its task is finished
    row = event(jid)
    assert row.status == "error" and row.is_final
    assert row.messages[-1]["message"] == "deleted by an operator before it ran"
    assert Task.objects.get(pk=row.task_id).status == "finished"


def test_a_tracked_job_an_operator_kills_while_it_waits_for_its_retry_ends_its_event(redis, monkeypatch):
    # Given a tracked job that crashed in a processor (which here keeps the test database's
    # connection open) and waits in the retry set ("waiting for retry")
    monkeypatch.setattr(processor, "close_old_connections", lambda: None)
    jid = Crashes.perform_async(1)
    inflight = keys.inflight("test:1:0000000000ff")
    raw = redis.lmove("queue:default", inflight, "RIGHT", "LEFT")
    processor.Processor(RetryPolicy(get_redis(), inflight)).process(UnitOfWork(raw, "default"))
    assert event(jid).status == "enqueue" and not event(jid).is_final
    entry = api.RetrySet().find_job(jid)
    assert entry is not None
    # When an operator kills it
    assert api.RetrySet().kill(entry)
    # Then tracking heard its end: a final error saying who sent it to the dead set
    row = event(jid)
    assert row.status == "error" and row.is_final
    assert row.messages[-1]["message"] == "sent to the dead set by an operator"
