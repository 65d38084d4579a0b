"""Django 6.1.3's tests/tasks/test_immediate_backend.py, on JobsBackend with a real worker.

The immediate backend runs a task inside ``enqueue``; JobsBackend pushes it and a ``runworkers``
(one for this module, started by the ``worker`` fixture) runs it. So each case enqueues, waits
until the worker has finished the task (``wait_finished``: ``refresh()`` until it is finished),
then asserts what upstream asserts. Changes, each marked "JobsBackend:":

- the log lines of a run (``state=RUNNING``, ``state=SUCCESSFUL``/``FAILED``) are written by the
  worker, so they are read from its output; the ``enqueued`` line is the caller's, as upstream;
- a task raising KeyboardInterrupt interrupts the immediate backend's caller; on a worker it is
  the task's failure (FAILED), and the worker keeps running;
- JobsBackend supports ``get_result``/``refresh`` and ``run_after``, which the immediate backend
  refuses: those cases assert that they work.
"""

import datetime as dt
import re

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.test import SimpleTestCase, TransactionTestCase, override_settings
from django.utils import timezone

from jobsapp.django_tasks import JobsBackend

from . import tasks as test_tasks
from .helpers import await_finished, wait_finished

JOBS_BACKEND = "jobsapp.django_tasks.JobsBackend"


class WorkerOutput:
    """The worker's django.tasks log lines about one task (upstream: ``assertLogs``)."""

    @pytest.fixture(autouse=True)
    def _worker(self, worker):
        self.worker = worker

    def task_log_lines(self, result_id):
        return [line for line in self.worker.output.splitlines() if " django.tasks: " in line and f"id={result_id} " in line]

    def task_log_text(self, result_id):
        """The log lines of one task with the traceback that follows a FAILED line."""
        text = self.worker.output
        match = re.search(rf"^.* django\.tasks: Task id={result_id} .*state=FAILED\n(?:(?!\d{{4}}-\d\d-\d\d ).*\n)*", text, re.MULTILINE)
        return match.group(0) if match else ""


@override_settings(
    TASKS={
        "default": {
            # JobsBackend: upstream uses the immediate backend
            "BACKEND": JOBS_BACKEND,
            "QUEUES": [],
        }
    }
)
class WorkerBackendTestCase(WorkerOutput, SimpleTestCase):
    def test_using_correct_backend(self):
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], JobsBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {})

    def test_enqueue_task(self):
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = task.enqueue(1, two=3)
                wait_finished(result)  # JobsBackend: the worker runs it

                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
                self.assertIs(result.is_finished, True)
                self.assertIsNotNone(result.started_at)
                self.assertIsNotNone(result.last_attempted_at)
                self.assertIsNotNone(result.finished_at)
                self.assertGreaterEqual(result.started_at, result.enqueued_at)
                self.assertGreaterEqual(result.finished_at, result.started_at)
                self.assertIsNone(result.return_value)
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 1)

    async def test_enqueue_task_async(self):
        for task in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task):
                result = await task.aenqueue()
                await await_finished(result)  # JobsBackend: the worker runs it

                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
                self.assertIs(result.is_finished, True)
                self.assertIsNotNone(result.started_at)
                self.assertIsNotNone(result.last_attempted_at)
                self.assertIsNotNone(result.finished_at)
                self.assertGreaterEqual(result.started_at, result.enqueued_at)
                self.assertGreaterEqual(result.finished_at, result.started_at)
                self.assertIsNone(result.return_value)
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})
                self.assertEqual(result.attempts, 1)

    def test_catches_exception(self):
        test_data = [
            (
                test_tasks.failing_task_value_error,  # Task function.
                ValueError,  # Expected exception.
                "This Task failed due to ValueError",  # Expected message.
            ),
            (
                test_tasks.failing_task_system_exit,
                SystemExit,
                "This Task failed due to SystemExit",
            ),
        ]
        for task, exception, message in test_data:
            with self.subTest(task):
                result = task.enqueue()
                wait_finished(result)  # JobsBackend: the worker runs it

                # JobsBackend: the worker logged one error about the task, with the message
                errors = [line for line in self.task_log_lines(result.id) if " ERROR " in line]
                self.assertEqual(len(errors), 1)
                self.assertIn(message, self.task_log_text(result.id))

                self.assertEqual(result.status, TaskResultStatus.FAILED)
                with self.assertRaisesMessage(ValueError, "Task failed"):
                    result.return_value
                self.assertIs(result.is_finished, True)
                self.assertIsNotNone(result.started_at)
                self.assertIsNotNone(result.last_attempted_at)
                self.assertIsNotNone(result.finished_at)
                self.assertGreaterEqual(result.started_at, result.enqueued_at)
                self.assertGreaterEqual(result.finished_at, result.started_at)
                self.assertEqual(result.errors[0].exception_class, exception)
                traceback = result.errors[0].traceback
                self.assertIs(
                    traceback and traceback.endswith(f"{exception.__name__}: {message}\n"),
                    True,
                    traceback,
                )
                self.assertEqual(result.task, task)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})

    def test_throws_keyboard_interrupt(self):
        # JobsBackend: the interrupt is the task's failure, not the worker's (nor the caller's)
        result = default_task_backend.enqueue(test_tasks.failing_task_keyboard_interrupt, [], {})
        wait_finished(result)
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class, KeyboardInterrupt)
        after = test_tasks.calculate_meaning_of_life.enqueue()
        self.assertEqual(wait_finished(after).return_value, 42)

    def test_complex_exception(self):
        result = test_tasks.complex_exception.enqueue()
        wait_finished(result)  # JobsBackend: the worker runs it
        self.assertEqual(len([line for line in self.task_log_lines(result.id) if " ERROR " in line]), 1)

        self.assertEqual(result.status, TaskResultStatus.FAILED)
        with self.assertRaisesMessage(ValueError, "Task failed"):
            result.return_value
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

    def test_complex_return_value(self):
        result = test_tasks.complex_return_value.enqueue()
        wait_finished(result)  # JobsBackend: the worker runs it
        self.assertEqual(len([line for line in self.task_log_lines(result.id) if " ERROR " in line]), 1)

        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertGreaterEqual(result.started_at, result.enqueued_at)
        self.assertGreaterEqual(result.finished_at, result.started_at)
        self.assertIsNone(result._return_value)
        self.assertEqual(result.errors[0].exception_class, TypeError)
        self.assertIn("Unsupported type", result.errors[0].traceback)

    def test_result(self):
        result = default_task_backend.enqueue(test_tasks.calculate_meaning_of_life, [], {})
        wait_finished(result)  # JobsBackend: the worker runs it

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 42)

    async def test_result_async(self):
        result = await default_task_backend.aenqueue(test_tasks.calculate_meaning_of_life, [], {})
        await await_finished(result)  # JobsBackend: the worker runs it

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 42)

    async def test_cannot_get_result(self):
        # JobsBackend: results can be read back; an unknown id is TaskResultDoesNotExist
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result("123")

        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result(123)

    async def test_cannot_refresh_result(self):
        # JobsBackend: results can be refreshed, to the worker's outcome
        result = await default_task_backend.aenqueue(test_tasks.calculate_meaning_of_life, (), {})

        await await_finished(result)
        self.assertEqual(result.return_value, 42)

        result.refresh()
        self.assertEqual(result.return_value, 42)

    def test_cannot_pass_run_after(self):
        # JobsBackend: run_after is supported; the task runs, not before run_after
        run_after = timezone.now() + dt.timedelta(seconds=1)
        task = test_tasks.calculate_meaning_of_life.using(run_after=run_after)
        default_task_backend.validate_task(task)
        result = wait_finished(task.enqueue())
        self.assertEqual(result.return_value, 42)
        self.assertGreaterEqual(result.started_at, run_after)

    def test_enqueue_logs(self):
        with self.assertLogs("django.tasks", level="DEBUG") as captured_logs:
            result = test_tasks.noop_task.enqueue()
        wait_finished(result)  # JobsBackend: the worker runs it and logs the rest

        self.assertEqual(len(captured_logs.output), 1)

        self.assertIn("enqueued", captured_logs.output[0])
        self.assertIn(result.id, captured_logs.output[0])

        worker_lines = self.task_log_lines(result.id)
        self.assertEqual(len(worker_lines), 2)

        self.assertIn("state=RUNNING", worker_lines[0])
        self.assertIn(result.id, worker_lines[0])

        self.assertIn("state=SUCCESSFUL", worker_lines[1])
        self.assertIn(result.id, worker_lines[1])

    def test_failed_logs(self):
        result = test_tasks.failing_task_value_error.enqueue()
        wait_finished(result)  # JobsBackend: the worker runs it and logs

        worker_lines = self.task_log_lines(result.id)
        self.assertEqual(len(worker_lines), 2)
        self.assertIn("state=RUNNING", worker_lines[0])
        self.assertIn(result.id, worker_lines[0])

        self.assertIn("state=FAILED", worker_lines[1])
        self.assertIn(result.id, worker_lines[1])

    def test_successful_task_no_none_in_logs(self):
        with self.assertLogs("django.tasks", level="DEBUG") as captured_logs:
            result = test_tasks.noop_task.enqueue()
        wait_finished(result)  # JobsBackend: the worker runs it and logs the rest

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

        for log_output in [*captured_logs.output, *self.task_log_lines(result.id)]:
            self.assertNotIn("None", log_output)

    def test_takes_context(self):
        result = test_tasks.get_task_id.enqueue()
        wait_finished(result)  # JobsBackend: the worker runs it

        self.assertEqual(result.return_value, result.id)

    def test_context(self):
        result = test_tasks.test_context.enqueue(1)
        wait_finished(result)  # JobsBackend: the worker runs it
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    def test_validate_on_enqueue(self):
        task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with override_settings(TASKS={"default": {"BACKEND": JOBS_BACKEND, "QUEUES": ["queue-1"]}}):
            with self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"):
                task_with_custom_queue_name.enqueue()

    async def test_validate_on_aenqueue(self):
        task_with_custom_queue_name = test_tasks.noop_task.using(queue_name="unknown_queue")

        with override_settings(TASKS={"default": {"BACKEND": JOBS_BACKEND, "QUEUES": ["queue-1"]}}):
            with self.assertRaisesMessage(InvalidTask, "Queue 'unknown_queue' is not valid for backend"):
                await task_with_custom_queue_name.aenqueue()


class WorkerBackendTransactionTestCase(WorkerOutput, TransactionTestCase):
    available_apps = []

    @override_settings(TASKS={"default": {"BACKEND": JOBS_BACKEND}})
    def test_doesnt_wait_until_transaction_commit_by_default(self):
        with transaction.atomic():
            result = test_tasks.noop_task.enqueue()

            self.assertIsNotNone(result.enqueued_at)

            wait_finished(result)  # JobsBackend: the worker runs it before the commit
            self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
