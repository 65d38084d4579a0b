"""Django 6.1.3's tests/tasks/test_dummy_backend.py, on JobsBackend.

The dummy backend records what is enqueued and runs nothing; JobsBackend pushes to Redis and
nothing runs either until a worker takes the job, so the cases keep their meaning. Changes,
each marked "JobsBackend:": the dummy backend's in-memory ``results`` are the jobs in Redis,
read back with ``get_result``; where upstream changes a stored result by hand (refresh), a
worker runs the task; ``clear()`` (a dummy-backend helper) is ``jobsapp.results.forget``.
"""

import time
from typing import cast
from unittest import mock

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.base import Task
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.test import SimpleTestCase, TransactionTestCase, override_settings

from jobsapp import results
from jobsapp.django_tasks import JobsBackend

from . import tasks as test_tasks
from .helpers import queued_results

JOBS_BACKEND = "jobsapp.django_tasks.JobsBackend"


def run_queued_tasks(start_suite_worker, result):
    """JobsBackend: a worker runs what is queued (upstream sets the stored status by hand)."""
    with start_suite_worker("tests.conformance.django_tasks.settings", queues=["default"]):
        deadline = time.monotonic() + 30
        while default_task_backend.get_result(result.id).status != TaskResultStatus.SUCCESSFUL:
            assert time.monotonic() < deadline, "the worker did not run the task"
            time.sleep(0.02)


@override_settings(
    TASKS={
        "default": {
            # JobsBackend: upstream uses the dummy backend
            "BACKEND": JOBS_BACKEND,
            "QUEUES": [],
        }
    }
)
class EnqueueBackendTestCase(SimpleTestCase):
    # JobsBackend: no setUp clearing results: every test starts on an empty Redis
    @pytest.fixture(autouse=True)
    def _start_suite_worker(self, start_suite_worker):
        self.start_suite_worker = start_suite_worker

    def test_using_correct_backend(self):
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], JobsBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {})

    def test_enqueue_task(self):
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = cast(Task, task).enqueue(1, two=3)

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertIs(result.is_finished, False)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 0)

                self.assertIn(result, queued_results())  # JobsBackend: results

    async def test_enqueue_task_async(self):
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = await cast(Task, task).aenqueue()

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertIs(result.is_finished, False)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 0)

                self.assertIn(result, queued_results())  # JobsBackend: results

    def test_get_result(self):
        result = default_task_backend.enqueue(test_tasks.noop_task, (), {})

        new_result = default_task_backend.get_result(result.id)

        self.assertEqual(result, new_result)

    async def test_get_result_async(self):
        result = await default_task_backend.aenqueue(test_tasks.noop_task, (), {})

        new_result = await default_task_backend.aget_result(result.id)

        self.assertEqual(result, new_result)

    def test_refresh_result(self):
        result = default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, (), {})

        run_queued_tasks(self.start_suite_worker, result)  # JobsBackend: a worker runs it

        self.assertEqual(result.status, TaskResultStatus.READY)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    async def test_refresh_result_async(self):
        result = await default_task_backend.aenqueue(test_tasks.calculate_meaning_of_life, (), {})

        await sync_to_async(run_queued_tasks)(self.start_suite_worker, result)  # JobsBackend

        self.assertEqual(result.status, TaskResultStatus.READY)
        await result.arefresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    async def test_get_missing_result(self):
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result("123")

        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result("123")

    def test_enqueue_logs(self):
        with self.assertLogs("django.tasks", level="DEBUG") as captured_logs:
            result = test_tasks.noop_task.enqueue()

        self.assertEqual(len(captured_logs.output), 1)
        self.assertIn("enqueued", captured_logs.output[0])
        self.assertIn(result.id, captured_logs.output[0])

    def test_errors(self):
        result = test_tasks.noop_task.enqueue()
        self.assertEqual(result.errors, [])

    def test_validate_disallowed_async_task(self):
        with mock.patch.multiple(default_task_backend, supports_async_task=False):
            with self.assertRaisesMessage(InvalidTask, "Backend does not support async Tasks."):
                default_task_backend.validate_task(test_tasks.noop_task_async)

    def test_check(self):
        errors = list(default_task_backend.check())
        self.assertEqual(len(errors), 0, errors)

    def test_takes_context(self):
        result = test_tasks.get_task_id.enqueue()
        self.assertEqual(result.status, TaskResultStatus.READY)

    def test_clear(self):
        result = test_tasks.noop_task.enqueue()

        default_task_backend.get_result(result.id)

        results.forget(result.id)  # JobsBackend: upstream's default_task_backend.clear()

        with self.assertRaisesMessage(TaskResultDoesNotExist, result.id):
            default_task_backend.get_result(result.id)

    def test_validate_on_enqueue(self):
        task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": JOBS_BACKEND,
                    "QUEUES": ["queue-1"],
                }
            }
        ):
            with self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"):
                task_with_custom_queue_name.enqueue()

    async def test_validate_on_aenqueue(self):
        task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": JOBS_BACKEND,
                    "QUEUES": ["queue-1"],
                }
            }
        ):
            with self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"):
                await task_with_custom_queue_name.aenqueue()


class EnqueueBackendTransactionTestCase(TransactionTestCase):
    available_apps = []

    @override_settings(
        TASKS={
            "default": {
                "BACKEND": JOBS_BACKEND,
            }
        }
    )
    def test_doesnt_wait_until_transaction_commit_by_default(self):
        with transaction.atomic():
            result = test_tasks.noop_task.enqueue()

            self.assertIsNotNone(result.enqueued_at)

            self.assertEqual(len(queued_results()), 1)  # JobsBackend: results

        self.assertEqual(len(queued_results()), 1)
