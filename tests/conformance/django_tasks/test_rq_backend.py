"""django-tasks-rq's tests/tests.py (the reference backend with a worker), on JobsBackend.

Upstream runs RQ's ``SimpleWorker`` in burst mode on fakeredis; here a real ``runworkers`` on the
test Redis runs the tasks. Changes, each marked "JobsBackend:":

- ``run_worker()`` waits until the worker has finished the task (read with ``get_result``, so
  the caller's result object is untouched until it calls ``refresh()``, as upstream);
- the worker's log lines are read from its output (upstream: ``assertLogs`` around the worker);
- the tasks module is Django's (its messages say "Task", RQ's "task"); a return value that is
  not JSON fails with Django's TypeError, as the immediate backend's does (RQ: its own payload);
- RQ-specific: a job that is no task is ``TaskResultDoesNotExist`` (RQ: SuspiciousOperation);
  the missing app and unknown queue checks name jobsapp's settings (RQ: django_rq, RQ_QUEUES);
  ``QUEUES: []`` accepts every queue (RQ fills it from RQ_QUEUES); a failed result whose error
  was lost is the record's error field removed (RQ: its job meta);
- ``CompatTestCase`` (the django-tasks package's own shim) is not ported.

The cases that need no worker come first: the ``worker`` fixture starts one for the rest.
"""

import json
import uuid
from typing import cast

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.base import Task
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.test import SimpleTestCase, override_settings

from jobsapp import client, keys
from jobsapp.connection import get_redis
from jobsapp.django_tasks import JobsBackend

from . import tasks as test_tasks
from .helpers import wait_finished

JOBS_BACKEND = "jobsapp.django_tasks.JobsBackend"
BACKEND_SETTINGS = {"default": {"BACKEND": JOBS_BACKEND, "QUEUES": ["default", "queue-1"]}}
#: JobsBackend: the queues workers run, as upstream's settings list them in RQ_QUEUES
WORKER_QUEUES = {**settings.JOBSAPP, "QUEUES": ["default", "queue-1"]}


def queued_ids(queue):
    """JobsBackend: the jids waiting in a queue, oldest first (upstream: ``Queue.job_ids``)."""
    return [json.loads(item)["jid"] for item in reversed(get_redis().lrange(f"queue:{queue}", 0, -1))]


@override_settings(TASKS=BACKEND_SETTINGS, JOBSAPP=WORKER_QUEUES)
class RQBackendWithoutWorkerTestCase(SimpleTestCase):
    """JobsBackend: upstream's cases that expect jobs to stay queued (no worker runs here)."""

    def test_queue_isolation(self) -> None:
        default_task = test_tasks.noop_task.enqueue()
        other_task = test_tasks.noop_task.using(queue_name="queue-1").enqueue()

        default_task_backend.get_result(default_task.id)
        default_task_backend.get_result(other_task.id)

        self.assertEqual(queued_ids("default"), [default_task.id])
        self.assertEqual(queued_ids("queue-1"), [other_task.id])

    def test_get_result(self) -> None:
        result = default_task_backend.enqueue(test_tasks.noop_task, [], {})

        new_result = default_task_backend.get_result(result.id)

        self.assertEqual(result, new_result)

    async def test_get_result_async(self) -> None:
        result = await default_task_backend.aenqueue(test_tasks.noop_task, [], {})

        new_result = await default_task_backend.aget_result(result.id)

        self.assertEqual(result, new_result)


@override_settings(TASKS=BACKEND_SETTINGS, JOBSAPP=WORKER_QUEUES)
class RQBackendTestCase(SimpleTestCase):
    @pytest.fixture(autouse=True)
    def _worker(self, worker):
        self.worker = worker

    def run_worker(self, result) -> None:
        # JobsBackend: the module's worker runs it; wait for its outcome without touching `result`
        wait_finished(default_task_backend.get_result(result.id))

    def task_log_lines(self, result_id):
        """JobsBackend: the worker's django.tasks lines about one task (upstream: assertLogs)."""
        return [line for line in self.worker.output.splitlines() if " django.tasks: " in line and f"id={result_id} " in line]

    def test_using_correct_backend(self) -> None:
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], JobsBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {})

    def test_enqueue_task(self) -> None:
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = cast(Task, task).enqueue(1, two=3)

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertFalse(result.is_finished)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 0)

    async def test_enqueue_task_async(self) -> None:
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = await cast(Task, task).aenqueue()

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertFalse(result.is_finished)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 0)

    def test_catches_exception(self) -> None:
        test_data = [
            (
                test_tasks.failing_task_value_error,  # task function
                ValueError,  # expected exception
                "This Task failed due to ValueError",  # expected message (JobsBackend: Django's tasks)
            ),
            (
                test_tasks.failing_task_system_exit,
                SystemExit,
                "This Task failed due to SystemExit",
            ),
        ]
        for task, exception, message in test_data:
            with (
                self.subTest(task),
            ):
                result = task.enqueue()

                self.run_worker(result)
                self.assertTrue(self.task_log_lines(result.id))  # JobsBackend: upstream's assertLogs

                result.refresh()

                # assert result
                self.assertEqual(result.status, TaskResultStatus.FAILED)
                with self.assertRaisesMessage(ValueError, "Task failed"):
                    result.return_value
                self.assertTrue(result.is_finished)
                self.assertIsNotNone(result.started_at)
                self.assertIsNotNone(result.last_attempted_at)
                self.assertIsNotNone(result.finished_at)
                self.assertGreaterEqual(result.started_at, result.enqueued_at)
                self.assertGreaterEqual(result.finished_at, result.started_at)
                self.assertEqual(result.errors[0].exception_class, exception)
                traceback = result.errors[0].traceback
                self.assertTrue(
                    traceback and traceback.endswith(f"{exception.__name__}: {message}\n"),
                    traceback,
                )
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 1)

    def test_complex_exception(self) -> None:
        result = test_tasks.complex_exception.enqueue()

        self.run_worker(result)
        self.assertTrue(self.task_log_lines(result.id))  # JobsBackend: upstream's assertLogs

        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertGreaterEqual(result.started_at, result.enqueued_at)
        self.assertGreaterEqual(result.finished_at, result.started_at)

        self.assertIsNone(result._return_value)
        self.assertEqual(result.errors[0].exception_class, ValueError)
        self.assertIn('ValueError(ValueError("This task failed"))', result.errors[0].traceback)

        self.assertEqual(result.task, test_tasks.complex_exception)
        self.assertEqual(result.args, [])
        self.assertEqual(result.kwargs, {})
        self.assertEqual(result.attempts, 1)

    def test_complex_return_value(self) -> None:
        result = test_tasks.complex_return_value.enqueue()

        self.run_worker(result)
        self.assertTrue(self.task_log_lines(result.id))  # JobsBackend: upstream's assertLogs

        result.refresh()

        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertGreaterEqual(result.started_at, result.enqueued_at)
        self.assertGreaterEqual(result.finished_at, result.started_at)

        self.assertIsNone(result._return_value)
        # JobsBackend: Django's error for a value that is not JSON (RQ: Exception, its own payload)
        self.assertEqual(result.errors[0].exception_class, TypeError)
        self.assertIn("Unsupported type", result.errors[0].traceback)

    def test_refresh_result(self) -> None:
        result = default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, (), {})

        self.run_worker(result)

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertFalse(result.is_finished)
        self.assertIsNone(result.started_at)
        self.assertIsNone(result.last_attempted_at)
        self.assertIsNone(result.finished_at)
        self.assertEqual(result.attempts, 0)

        result.refresh()

        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertTrue(result.is_finished)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.attempts, 1)

    def test_refresh_result_async(self) -> None:
        result = async_to_sync(default_task_backend.aenqueue)(test_tasks.calculate_meaning_of_life, (), {})

        self.run_worker(result)

        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertFalse(result.is_finished)
        self.assertIsNone(result.started_at)
        self.assertIsNone(result.last_attempted_at)
        self.assertIsNone(result.finished_at)
        self.assertEqual(result.attempts, 0)

        async_to_sync(result.arefresh)()

        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertTrue(result.is_finished)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.attempts, 1)

    def test_get_missing_result(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(str(uuid.uuid4()))

    async def test_async_get_missing_result(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result(str(uuid.uuid4()))

    def test_invalid_uuid(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result("123")

    async def test_async_invalid_uuid(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result("123")

    def test_invalid_task_path(self) -> None:
        # JobsBackend: a retained job of another class, pushed on a queue nothing consumes here
        jid = client.push({"class": "subprocess.check_output", "args": ["exit", "1"], "queue": "elsewhere", "retain": 60})

        # JobsBackend: it is no task of this backend, so there is no such result (RQ: SuspiciousOperation)
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(jid)

    def test_check(self) -> None:
        errors = list(default_task_backend.check())

        self.assertEqual(len(errors), 0, errors)

    @override_settings(INSTALLED_APPS=[])
    def test_rq_app_missing(self) -> None:
        errors = list(default_task_backend.check())

        self.assertEqual(len(errors), 1)
        self.assertIn('Add "jobsapp" to INSTALLED_APPS', errors[0].hint)  # JobsBackend: not django_rq

    def test_enqueue_logs(self) -> None:
        with self.assertLogs("django.tasks", level="DEBUG") as captured_logs:
            result = test_tasks.noop_task.enqueue()

        self.assertEqual(len(captured_logs.output), 1)
        self.assertIn("enqueued", captured_logs.output[0])
        self.assertIn(result.id, captured_logs.output[0])

    def test_started_finished_logs(self) -> None:
        result = test_tasks.noop_task.enqueue()

        self.run_worker(result)
        captured_logs = self.task_log_lines(result.id)  # JobsBackend: the worker's output

        self.assertEqual(len(captured_logs), 2)
        self.assertIn("state=RUNNING", captured_logs[0])
        self.assertIn(result.id, captured_logs[0])

        self.assertIn("state=SUCCESSFUL", captured_logs[1])
        self.assertIn(result.id, captured_logs[1])

    def test_failed_logs(self) -> None:
        result = test_tasks.failing_task_value_error.enqueue()

        self.run_worker(result)
        captured_logs = self.task_log_lines(result.id)  # JobsBackend: the worker's output

        self.assertEqual(len(captured_logs), 2)
        self.assertIn("state=RUNNING", captured_logs[0])
        self.assertIn(result.id, captured_logs[0])

        self.assertIn("state=FAILED", captured_logs[1])
        self.assertIn(result.id, captured_logs[1])

    @override_settings(TASKS={"default": {"BACKEND": JOBS_BACKEND, "QUEUES": []}})
    def test_uses_rq_queues_for_queue_names(self) -> None:
        # JobsBackend: QUEUES [] accepts every queue (RQ fills it in from RQ_QUEUES)
        self.assertEqual(default_task_backend.queues, set())
        self.assertEqual(test_tasks.noop_task.using(queue_name="queue-7").queue_name, "queue-7")

    @override_settings(
        TASKS={
            "default": {
                "BACKEND": JOBS_BACKEND,
                "QUEUES": ["queue-2"],
            }
        }
    )
    def test_unknown_queue_name(self) -> None:
        errors = list(default_task_backend.check())

        self.assertEqual(len(errors), 1)
        self.assertIn("add them to JOBSAPP['QUEUES']", errors[0].hint)  # JobsBackend: not RQ_QUEUES

    def test_takes_context(self) -> None:
        result = test_tasks.get_task_id.enqueue()

        self.run_worker(result)

        result.refresh()

        self.assertEqual(result.return_value, result.id)

    def test_context(self) -> None:
        result = test_tasks.test_context.enqueue(1)
        self.run_worker(result)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    def test_exception_classes_pop_empty_list_bug(self) -> None:
        """A failed result whose recorded exception is gone still reads back (upstream: an
        IndexError once); JobsBackend: the record's error fields are removed by hand."""
        result = test_tasks.failing_task_value_error.enqueue()

        self.run_worker(result)

        get_redis().hdel(keys.result(result.id), "error_class", "error_message", "error_traceback")

        task_result = default_task_backend.get_result(result.id)

        self.assertEqual(task_result.status, TaskResultStatus.FAILED)
        self.assertEqual(task_result.task, test_tasks.failing_task_value_error)
        self.assertIsInstance(task_result.errors, list)
        self.assertEqual(task_result.errors[0].exception_class_path, "builtins.Exception")

    def test_validate_on_enqueue(self) -> None:
        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": JOBS_BACKEND,
                    "QUEUES": ["unknown_queue"],
                }
            }
        ):
            task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"):
            task_with_custom_queue_name.enqueue()

    async def test_validate_on_aenqueue(self) -> None:
        with override_settings(
            TASKS={
                "default": {
                    "BACKEND": JOBS_BACKEND,
                    "QUEUES": ["unknown_queue"],
                }
            }
        ):
            task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"):
            await task_with_custom_queue_name.aenqueue()
