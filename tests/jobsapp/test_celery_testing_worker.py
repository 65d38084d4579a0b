"""``jobsapp.celery.contrib.testing.worker.start_worker``: a real worker on threads of the test
process, with what Celery's test worker gives a test (``task_received`` here, ``celery.worker.state``)."""

from __future__ import annotations

import threading

import pytest

from jobsapp import api
from jobsapp.celery import Celery, signals
from jobsapp.celery.contrib.testing.worker import start_worker
from jobsapp.celery.exceptions import TimeoutError as CeleryTimeoutError
from jobsapp.celery.worker import state as worker_state
from jobsapp.celery.worker.request import Request
from tests.testapp.tasks import celery_add, celery_always_fails
from tests.workers import wait_until


@pytest.fixture
def app():
    return Celery("tests")


def test_a_worker_in_the_test_process_runs_tasks_and_leaves_the_process_list_when_it_stops(app, redis):
    # Given a worker started in this process
    with start_worker(app, concurrency=2) as worker:
        # Then it is registered like any worker and took the ping it was started with
        assert worker.is_alive()
        assert any(process.identity == worker.identity for process in api.ProcessSet.all())
        # When a task is applied, Then it runs on one of the worker's threads and its value comes back
        assert celery_add.delay(2, 3).get(timeout=10) == 5
    # When the block ends, Then the worker is stopped and off the process list
    assert not worker.is_alive()
    assert not any(process.identity == worker.identity for process in api.ProcessSet.all())
    # And nothing runs the next task
    with pytest.raises(CeleryTimeoutError):
        celery_add.delay(1, 1).get(timeout=0.5)


def test_task_received_reaches_a_receiver_connected_in_the_test_process(app):
    # Given a task_received receiver connected here, and the worker in this process
    seen: list[Request] = []
    threads: list[str] = []

    def receiver(sender=None, request=None, **named):
        seen.append(request)
        threads.append(threading.current_thread().name)

    signals.task_received.connect(receiver)
    try:
        with start_worker(app, perform_ping_check=False) as worker:
            result = celery_add.apply_async((4, 2), link=celery_add.s(10))
            assert result.get(timeout=10) == 6
            # (counted once its result is stored, as Celery counts it: just after get() can see it)
            worker_state_seen = wait_until(lambda: result.id in worker_state.successful_requests, timeout_seconds=5)
    finally:
        signals.task_received.disconnect(receiver)
    # Then the receiver got Celery's Request for the task, on a worker thread, with its payload
    first = next(request for request in seen if request.id == result.id)
    assert isinstance(first, Request) and first.task_name == celery_add.name
    assert first.replaced_task_nesting == 0 and first.stamps == {} and first.stamped_headers == []
    args, kwargs, embed = first._Request__payload
    assert (args, kwargs) == ([4, 2], {})
    assert embed["callbacks"][0]["task"] == celery_add.name and embed["errbacks"] is None
    assert all(name.startswith("jobsapp.processor") for name in threads)
    assert worker_state_seen and worker.identity


def test_worker_state_records_what_the_worker_here_took_and_finished(app):
    # Given the worker in this process
    with start_worker(app, perform_ping_check=False):
        done = celery_add.delay(1, 2)
        failed = celery_always_fails.apply_async(("no",), queue="default")
        assert done.get(timeout=10) == 3
        with pytest.raises(ValueError):
            failed.get(timeout=10)
    # Then a succeeded task is in successful_requests, a failed one is not, and nothing is held
    assert done.id in worker_state.successful_requests
    assert failed.id not in worker_state.successful_requests
    assert done.id not in worker_state.requests and not list(worker_state.active_requests)
    assert worker_state.total_count[celery_add.name] >= 1


def test_worker_state_is_refused_where_the_worker_runs_elsewhere():
    # Given a process that declares its worker is another process
    with signals.worker_elsewhere("runworkers is a subprocess of these tests"):
        # Then reading the worker's memory here is refused, naming why, instead of answering empty
        with pytest.raises(NotImplementedError, match="subprocess of these tests"):
            _ = "x" in worker_state.successful_requests
        with pytest.raises(NotImplementedError, match="requests"):
            len(worker_state.requests)


def test_successful_requests_keeps_only_the_newest_ids():
    # Given a bounded set, When more ids than its bound are added, Then the oldest are forgotten
    kept = worker_state.LimitedSet("successful_requests", maxlen=3)
    for number in range(5):
        kept.add(str(number))
    assert list(kept) == ["2", "3", "4"] and "0" not in kept


def test_start_worker_reports_a_worker_that_cannot_start(app, settings):
    # Given settings naming a Redis nobody listens on, and a short wait
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": "redis://127.0.0.1:1/0"}
    from jobsapp import connection
    from jobsapp.celery.contrib.testing import worker as testing_worker

    connection.reset()
    original = testing_worker.START_TIMEOUT_SECONDS
    testing_worker.START_TIMEOUT_SECONDS = 1.0
    try:
        # Then start_worker fails loudly within its wait instead of hanging
        with pytest.raises(testing_worker.WorkerStartError, match="did not register"), start_worker(app):
            pass
    finally:
        testing_worker.START_TIMEOUT_SECONDS = original
        connection.reset()


PLUGIN_TEST = """
pytest_plugins = ("jobsapp.celery.contrib.pytest",)

import pytest

from jobsapp.celery.worker import state
from tests.testapp.tasks import celery_add
from tests.workers import wait_until


@pytest.fixture(scope="session")
def celery_worker_parameters():
    return {"concurrency": 2}


@pytest.fixture(scope="session")
def celery_includes():
    return ["included_tasks"]  # this module never imports it: the fixture does


def test_add(celery_app, celery_worker):
    assert celery_worker.concurrency == 2
    result = celery_add.delay(20, 22)
    assert result.get(timeout=10) == 42
    assert wait_until(lambda: result.id in state.successful_requests, timeout_seconds=5)
    assert celery_app.send_task("included.echo", args=["hi"]).get(timeout=10) == "hi"
"""

INCLUDED_TASKS = """
from jobsapp.celery import shared_task


@shared_task(name="included.echo")
def echo(value):
    return value
"""


def test_celerys_pytest_fixtures_run_a_worker_in_the_test_process(tmp_path, redis_server):
    # Given a test module written as Celery's docs write one, with only the plugin's path changed
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "test_with_celery_worker.py").write_text(PLUGIN_TEST)
    (tmp_path / "included_tasks.py").write_text(INCLUDED_TASKS)
    env = {**os.environ, "REDIS_URL": redis_server.url, "PYTHONPATH": f"{root}:{tmp_path}", "DJANGO_SETTINGS_MODULE": "tests.settings"}
    # When pytest runs it, Then the celery_worker fixture runs the task and the test passes
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_django", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-2000:]
    assert "1 passed" in completed.stdout
