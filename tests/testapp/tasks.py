"""Jobs and tasks the results, function-job, django.tasks and Celery tests run in real workers
(autodiscovered like jobs.py)."""

from __future__ import annotations

from jobsapp import Job, sidekiq_options


@sidekiq_options(retain=600)
class Add(Job):
    """Returns the sum of its arguments; the result is retained for ten minutes."""

    def perform(self, left, right):
        return left + right


@sidekiq_options(retain=600, retry=1)
class FailTwice(Job):
    """Always fails; one retry after one second, then the dead set."""

    @classmethod
    def sidekiq_retry_in(cls, count, exception):
        return 1

    def perform(self, message):
        raise ValueError(message)


@sidekiq_options(retain=600)
class ReturnsObject(Job):
    def perform(self):
        return object()


# --- function jobs -----------------------------------------------------------------------

import jobsapp  # noqa: E402


@jobsapp.job(queue="default", retain=600)
def multiply(left: int, right: int, *, scale: int = 1) -> int:
    """A function job whose result is retained."""
    return left * right * scale


@jobsapp.job
def record_call(value: str) -> None:
    from jobsapp.connection import get_redis

    get_redis().rpush("test:function-ran", value)


# --- django.tasks (Django 6.0+ only) -------------------------------------------------------

import django  # noqa: E402

if django.VERSION >= (6, 0):
    import asyncio

    from django.dispatch import receiver
    from django.tasks import task
    from django.tasks.signals import task_finished, task_started

    SIGNALS_KEY = "test:task-signals"

    @task
    def add_numbers(left: int, right: int) -> int:
        return left + right

    @task(queue_name="critical")
    def fail_task(message: str) -> None:
        raise ValueError(message)

    @task(takes_context=True)
    def which_attempt(context) -> dict:
        return {"attempt": context.attempt, "id": context.task_result.id}

    @task
    async def async_double(value: int) -> int:
        await asyncio.sleep(0)
        return value * 2

    @receiver(task_started)
    @receiver(task_finished)
    def _record_signal(sender, task_result, **kwargs):
        from jobsapp.connection import get_redis

        get_redis().rpush(SIGNALS_KEY, f"{task_result.id}:{task_result.status}")


# --- Celery-style tasks ------------------------------------------------------------------

from jobsapp.celery import shared_task  # noqa: E402


@shared_task
def celery_add(left, right):
    return left + right


@shared_task(name="celery-tests.collect")
def celery_collect(values, *extra):
    """A chord callback: returns what it was given, to check the order."""
    return {"values": values, "extra": list(extra)}


@shared_task(bind=True, max_retries=5, default_retry_delay=1)
def celery_flaky(self, succeed_at):
    """Retries itself until request.retries reaches ``succeed_at``; returns what it saw."""
    if self.request.retries < succeed_at:
        raise self.retry(countdown=0.2)
    return {"id": self.request.id, "retries": self.request.retries, "args": self.request.args}


@shared_task(autoretry_for=(ValueError,), max_retries=1, default_retry_delay=0)
def celery_always_fails(message):
    raise ValueError(message)


@shared_task(queue="critical")
def celery_fails_once_no_retry(message):
    raise KeyError(message)


@shared_task(queue="chords")
def celery_pause_own_queue(value):
    """A chord header task that pauses its queue as it ends: what the chord pushes next waits there."""
    from jobsapp import keys
    from jobsapp.connection import get_redis

    get_redis().sadd(keys.PAUSED, "chords")
    return value


# --- async functions and tasks (tests/jobsapp/test_async.py) ------------------------------

import asyncio  # noqa: E402


@jobsapp.job(retain=600)
async def async_multiply(left: int, right: int) -> int:
    """An async function job: awaited on the worker's loop; its result is retained."""
    await asyncio.sleep(0.01)
    return left * right


@shared_task
async def celery_async_add(left, right):
    await asyncio.sleep(0.01)
    return left + right


# --- Celery's worker signals (tests/jobsapp/test_celery.py): receivers connected only in a worker
# started with JOBSAPP_TEST_WORKER_SIGNALS set, so no other test's worker writes anything ---------

import os  # noqa: E402

WORKER_SIGNALS_KEY = "test:worker-signals"

if os.environ.get("JOBSAPP_TEST_WORKER_SIGNALS") == "1":
    from jobsapp import connection
    from jobsapp.celery.signals import worker_ready, worker_shutdown

    @worker_ready.connect
    @worker_shutdown.connect
    def record_worker_signal(signal, sender, **named):
        """Each signal heard: "<signal> <pid> <sender>" on a Redis list the test reads."""
        connection.get_redis().rpush(WORKER_SIGNALS_KEY, f"{signal.name} {os.getpid()} {sender!r}")
