"""The processor around a job: Django's stale database connections are closed as Django closes
them around a request, in every thread that has opened one, without a redundant check between
back-to-back jobs of one thread, and not at all in a thread that never opened one.

``close_old_connections`` is replaced by a recorder of its calls in most tests (when the
processor asks Django to close stale connections is what they look at); the last test lets
Django close a real connection."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from jobsapp import keys
from jobsapp.connection import get_redis
from jobsapp.worker import processor as processor_module
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from tests.testapp.jobs import RAN_KEY, Record

INFLIGHT = keys.inflight("test:1:000000000000")


@pytest.fixture
def checks(monkeypatch) -> list[str]:
    """Each close_old_connections call, as the value of the job running (``before:x``/``after:x``)."""
    calls: list[str] = []

    def recorder() -> None:
        ran = [value.decode() for value in get_redis().lrange(RAN_KEY, 0, -1)]
        calls.append(f"after:{ran[-1]}" if ran and f"after:{ran[-1]}" not in calls else "before")

    monkeypatch.setattr(processor_module, "close_old_connections", recorder)
    return calls


def fetched(redis, value: str) -> UnitOfWork:
    Record.perform_async(value)
    raw = redis.lmove("queue:default", INFLIGHT, "RIGHT", "LEFT")
    return UnitOfWork(raw, "default")


def run_in_new_thread(target, *, database: bool = True) -> None:
    """``target`` in a thread of its own, which first opens a database connection (``database``)."""

    def run() -> None:
        if database:
            connection.ensure_connection()
        target()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(20)


pytestmark = pytest.mark.django_db(transaction=True)


def test_connections_are_checked_before_and_after_a_thread_first_job(redis, checks):
    # Given a processor, When a thread that has opened a database connection runs its first job
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT))
    run_in_new_thread(lambda: processor.process(fetched(redis, "a")))
    # Then stale connections were closed before it started and after it ended
    assert checks == ["before", "after:a"]


def test_a_thread_that_never_opened_a_database_connection_checks_nothing(redis, checks):
    # Given a processor, When a thread that never touched the database runs two jobs
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT))

    def two_jobs() -> None:
        processor.process(fetched(redis, "a"))
        processor.process(fetched(redis, "b"))

    run_in_new_thread(two_jobs, database=False)
    # Then both ran, and no check was made: the thread has no connection that could be stale
    assert [value.decode() for value in redis.lrange(RAN_KEY, 0, -1)] == ["a", "b"]
    assert checks == []


def test_a_connection_opened_by_a_job_is_closed_after_it(redis, settings):
    # Given the database's CONN_MAX_AGE of 0 (a connection per request, Django's default)
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT))
    open_after: list[bool] = []

    def job_that_opens_a_connection() -> None:
        unit = fetched(redis, "a")
        connection.ensure_connection()  # as the job's first query would, in this thread
        processor.process(unit)
        open_after.append(connection.connection is not None)

    # When a thread opens a connection and then runs a job
    run_in_new_thread(job_that_opens_a_connection, database=False)
    # Then no connection outlives the job
    assert open_after == [False]


def test_back_to_back_jobs_of_a_thread_check_once_between_them(redis, checks):
    # Given a processor, When a thread runs two jobs back to back
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT))

    def two_jobs() -> None:
        processor.process(fetched(redis, "a"))
        processor.process(fetched(redis, "b"))

    run_in_new_thread(two_jobs)
    # Then the check after the first one also serves before the second
    assert checks == ["before", "after:a", "after:b"]


def test_a_thread_that_idled_checks_again_before_its_next_job(redis, checks, monkeypatch):
    # Given a thread that ran a job, then idled longer than CONNECTIONS_FRESH_SECONDS (0 here)
    processor = Processor(RetryPolicy(get_redis(), INFLIGHT))
    monkeypatch.setattr(processor_module, "CONNECTIONS_FRESH_SECONDS", 0.0)

    def two_jobs() -> None:
        processor.process(fetched(redis, "a"))
        processor.process(fetched(redis, "b"))

    # When it runs the next job
    run_in_new_thread(two_jobs)
    # Then stale connections are closed before it starts, as before the first
    assert checks == ["before", "after:a", "before", "after:b"]
