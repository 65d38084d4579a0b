"""The Celery-compatible API (jobsapp.celery) against a real runworkers, and its typing."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from jobsapp import keys, middleware, registry, result_writer, results
from jobsapp.celery import AsyncResult, Celery, TimeoutError, chain, chord, group, revoke
from jobsapp.celery.signals import (
    WorkerSignals,
    before_task_publish,
    install_worker_signals,
    task_received,
    worker_elsewhere,
    worker_ready,
)
from tests.jobsapp import sidekiq_data
from tests.testapp.tasks import (
    WORKER_SIGNALS_KEY,
    celery_add,
    celery_always_fails,
    celery_collect,
    celery_fails_once_no_retry,
    celery_flaky,
)
from tests.workers import WorkerProcess, wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_tasks_are_registered_under_celery_names_and_push_sidekiq_items(redis):
    # Given Celery-style tasks, Then their wire names are Celery's default and explicit names
    assert celery_add.name == "tests.testapp.tasks.celery_add" and registry.is_registered(celery_add.name)
    assert registry.is_registered("celery-tests.collect")
    # When one is applied with options, Then the item carries them and the id is the jid
    result = celery_add.apply_async((1, 2), task_id="my-task-id", queue="critical", headers={"trace": "x"})
    item = json.loads(redis.lpop("queue:critical"))
    assert (item["jid"], item["args"], item["celery_headers"]) == ("my-task-id", [1, 2], {"trace": "x"})
    assert result.id == "my-task-id" and result.state == "PENDING" and not result.ready()
    # And countdown and eta go to the schedule set
    celery_add.apply_async((1, 1), countdown=60)
    assert redis.zcard("schedule") == 1


def test_unsupported_options_warn_once_and_unknown_ones_are_refused(redis):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        celery_add.apply_async((1, 1), routing_key="x")
        celery_add.apply_async((1, 1), routing_key="y")
    assert len([w for w in caught if "routing_key" in str(w.message)]) == 1
    with pytest.raises(TypeError, match="colour"):
        celery_add.apply_async((1, 1), colour="red")


def test_revoke_removes_a_waiting_task_and_says_revoked(redis):
    result = celery_add.apply_async((1, 1), countdown=60)
    assert revoke(result.id) == 1
    assert redis.zcard("schedule") == 0 and result.state == "REVOKED" and result.ready()


def test_get_times_out_and_calling_directly_runs_here(redis):
    result = celery_add.apply_async((1, 1), countdown=60)
    with pytest.raises(TimeoutError):
        result.get(timeout=0.2, interval=0.05)
    assert celery_add(2, 2) == 4 and celery_add.s(3)(4) == 7
    assert AsyncResult("f" * 24).state == "PENDING"


@pytest.mark.slow
def test_calls_retries_and_canvas_on_a_real_worker(redis_server, redis):
    # Given calls of every shape, pushed before the worker starts
    plain = celery_add.delay(2, 3)
    flaky = celery_flaky.delay(2)
    exhausted = celery_always_fails.delay("nope")
    failed = celery_fails_once_no_retry.delay("missing")
    chained = chain(celery_add.s(1, 2), celery_add.s(10), celery_add.si(100, 200)).apply_async()
    piped = (celery_add.s(1, 1) | celery_add.s(5)).apply_async()
    grouped = group(celery_add.s(index, index) for index in range(4)).apply_async()
    chorded = chord([celery_add.s(index, 1) for index in range(5)], celery_collect.s("tail")).apply_async()
    upgraded = chain(group(celery_add.s(1, 1), celery_add.s(2, 2)), celery_collect.s()).apply_async()
    failing_chain = chain(celery_fails_once_no_retry.s("first"), celery_add.s(1)).apply_async()
    expired = celery_add.apply_async((1, 1), expires=0.001)
    sent = Celery("proj").send_task("celery-tests.collect", args=([1],), kwargs=None)
    deferred_at = time.time() + 1
    deferred = celery_add.apply_async((5, 5), countdown=1)
    at_eta = celery_add.apply_async((6, 6), eta=dt.datetime.fromtimestamp(deferred_at, tz=dt.UTC))
    with WorkerProcess(["-c", "4", "-q", "default", "-q", "critical"], redis_url=redis_server.url):
        # Then values come back as Celery gives them
        assert plain.get(timeout=10) == 5 and plain.successful() and plain.state == "SUCCESS"
        assert flaky.get(timeout=15) == {"id": flaky.id, "retries": 2, "args": [2]}
        assert chained.get(timeout=10) == 300
        assert piped.get(timeout=10) == 7
        assert grouped.get(timeout=10) == [0, 2, 4, 6]
        assert chorded.get(timeout=10) == {"values": [1, 2, 3, 4, 5], "extra": ["tail"]}
        assert upgraded.get(timeout=10) == {"values": [2, 4], "extra": []}
        # And errors are raised as the task raised them, after autoretry's one retry
        with pytest.raises(ValueError, match="nope"):
            exhausted.get(timeout=15)
        with pytest.raises(KeyError):
            failed.get(timeout=10)
        with pytest.raises(KeyError):
            failing_chain.get(timeout=10)
        assert sent.get(timeout=10) == {"values": [1], "extra": []}
        assert deferred.get(timeout=10) == 10 and at_eta.get(timeout=10) == 12
        assert min(results.get(deferred.id).started_at, results.get(at_eta.id).started_at) >= deferred_at - 0.05
        assert expired.get(timeout=10, propagate=False).__class__.__name__ == "TaskRevokedError"
    assert exhausted.failed() and exhausted.state == "FAILURE"
    # And forget() drops a stored result
    plain.forget()
    assert plain.state == "PENDING"


@pytest.mark.slow
@pytest.mark.standalone_only  # the receiver and the test read one plain key
def test_each_worker_process_sends_worker_ready_and_worker_shutdown_once(redis_server, redis):
    # Given a worker of two processes whose tasks module connects receivers to both signals
    worker = WorkerProcess(["-P", "2", "-c", "2"], env={"JOBSAPP_TEST_WORKER_SIGNALS": "1"}, redis_url=redis_server.url)
    with worker:
        pids = sorted(worker.info(identity)["pid"] for identity in worker.identities)

        # When the processes are up, Then each has sent worker_ready once, with no sender
        def heard() -> list[str]:
            return sorted(entry.decode() for entry in redis.lrange(WORKER_SIGNALS_KEY, 0, -1))

        wait_until(lambda: len(heard()) >= 2, message="worker_ready from both processes")
        assert heard() == sorted(f"worker_ready {pid} None" for pid in pids)

    # When the worker stops, Then each process has sent worker_shutdown once too, and nothing else
    assert heard() == sorted([*(f"worker_ready {pid} None" for pid in pids), *(f"worker_shutdown {pid} None" for pid in pids)])


def test_the_worker_signals_cost_a_job_nothing_until_a_receiver_connects(settings):
    # Given no receiver of worker_ready or worker_shutdown (the tests' tasks module connects none here)
    # When tasks are declared, Then the server chain holds no WorkerSignals: jobs pay no extra call
    middleware.reset_chains()
    try:
        install_worker_signals()
        assert WorkerSignals not in middleware.server_chain()

        # When a receiver connects, Then the chain carries the signals to it
        def receiver(**named):
            return None

        worker_ready.connect(receiver)
        try:
            assert WorkerSignals in middleware.server_chain()
        finally:
            worker_ready.disconnect(receiver)
    finally:
        middleware.reset_chains()


def test_a_task_received_receiver_is_refused_where_the_worker_runs_elsewhere():
    # Given a process that declares its worker runs elsewhere (tests driving a runworkers subprocess)
    def receiver(**named):
        return None

    with worker_elsewhere("runworkers is a subprocess of these tests"):
        # When a receiver connects to task_received, Then it is refused, naming why, and not connected
        with pytest.raises(NotImplementedError, match="runworkers is a subprocess of these tests"):
            task_received.connect(receiver)
        assert receiver not in task_received.receivers
        with pytest.raises(NotImplementedError, match="worker_ready is sent in a worker process"):
            worker_ready.connect(receiver)
        # And a signal the calling process sends itself (before_task_publish) still connects
        before_task_publish.connect(receiver)
        before_task_publish.disconnect(receiver)
    # When the block ends, Then task_received connects again
    task_received.connect(receiver)
    try:
        assert receiver in task_received.receivers
    finally:
        task_received.disconnect(receiver)


SAMPLE = ROOT / "tests" / "celery_sample" / "sample.py"
MYPY = Path(sys.executable).with_name("mypy")


def _has_celery_types() -> bool:
    try:
        importlib.metadata.version("celery-types")
    except importlib.metadata.PackageNotFoundError:
        return False
    return MYPY.exists()


@pytest.mark.skipif(not _has_celery_types(), reason="mypy or celery-types is not installed (pip install -r requirements-dev.txt)")
def test_inspect_reserved_lists_the_tasks_a_process_fetched_and_has_not_started(redis):
    # Given a live process that fetched three tasks (its in-flight list, as fetch.lua fills it):
    # one it runs (its heartbeat shows it), one that started since (its result says so), one waiting
    running, started, waiting = celery_add.delay(1, 1), celery_add.delay(2, 2), celery_add.delay(3, 3)
    raws = redis.lrange("queue:default", 0, -1)[::-1]  # oldest first
    identity = sidekiq_data.process(redis, running=[json.loads(raws[0])])
    for raw in raws:
        redis.lpush(keys.inflight(identity), raw)
    redis.delete("queue:default")
    result_writer.write_fields(started.id, {"status": results.RUNNING}, retain_seconds=60, wait=True)
    # When Celery's inspect asks what is reserved, Then only the waiting task is, described as Celery does
    reserved = Celery("inspect").control.inspect().reserved()
    assert list(reserved) == [identity]
    [request] = reserved[identity]
    assert (request["id"], request["name"], request["args"]) == (waiting.id, celery_add.name, [3, 3])
    assert request["hostname"] == identity and request["acknowledged"] is False and running.id != waiting.id


@pytest.mark.parametrize("source", ["celery", "jobsapp.celery"])
def test_a_celery_module_type_checks_against_both_apis(tmp_path, source):
    # Given a module written against Celery's API (checked with celery-types' stubs), When its
    # imports name jobsapp.celery instead, Then mypy --strict accepts it too: the signatures match
    text = SAMPLE.read_text()
    if source == "jobsapp.celery":
        text = text.replace("from celery import", "from jobsapp.celery import").replace(
            "from celery.result import", "from jobsapp.celery import"
        )
        assert "celery import" not in text.replace("jobsapp.celery import", "")
    module = tmp_path / "sample.py"
    module.write_text(text)
    command = [str(MYPY), "--strict", "--no-incremental", "--follow-imports=silent", "--config-file=", str(module)]
    completed = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.mark.django_db
def test_delay_on_commit_pushes_after_the_commit_and_delay_at_once(redis, django_capture_on_commit_callbacks):
    from django.db import transaction

    with django_capture_on_commit_callbacks(execute=True) as callbacks, transaction.atomic():
        celery_add.delay(5, 5)
        assert redis.llen("queue:default") == 1  # as Celery's delay: at once, even in a transaction
        celery_add.delay_on_commit(1, 2)
        assert redis.llen("queue:default") == 1
    assert len(callbacks) == 1 and redis.llen("queue:default") == 2


def test_the_celery_app_object_sends_tasks_by_name_and_revokes(redis):
    app = Celery("proj")
    app.autodiscover_tasks()
    # Given a task sent by name only (this process needs not define it), Then it is a plain push
    result = app.send_task("some.remote.task", args=(1, (2, 3)), queue="remote", countdown=60)
    member = json.loads(redis.zrange("schedule", 0, 0)[0])
    assert member["class"] == "some.remote.task" and member["args"] == [1, [2, 3]] and member["queue"] == "remote"
    # And app.control.revoke removes it before it starts
    assert app.control.revoke(result.id) == 1 and app.AsyncResult(result.id).state == "REVOKED"
    # And @app.task defines a task like shared_task
    assert app.task is not None


def test_a_retrying_task_reports_the_error_that_caused_the_retry(redis):
    from jobsapp.celery import Retry

    result = celery_add.apply_async((1, 1))
    item = json.loads(redis.lpop("queue:default"))
    result_writer.recorder.on_retry(item, Retry(exc=ConnectionError("down"), countdown=5), retry_count=0, run_at=time.time() + 5)
    assert result.state == "RETRY" and isinstance(result.result, ConnectionError) and str(result.result) == "down"
