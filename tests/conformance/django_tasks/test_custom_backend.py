"""Django 6.1.3's tests/tasks/test_custom_backend.py, on subclasses of JobsBackend.

Upstream subclasses ``BaseTaskBackend``; here the custom backends subclass ``JobsBackend``, as a
project extending it would. Changes, each marked "JobsBackend:":

- ``test_options``: the custom backend logs, then JobsBackend's enqueue pushes the job;
- ``test_backend_does_not_support_priority``: JobsBackend accepts a priority and ignores it,
  with a ``PriorityIgnored`` warning (refusing it stopped a whole project at import);
- ``test_no_enqueue``: JobsBackend implements ``enqueue``, so a subclass that does not override
  it is a working backend (upstream checks that Django's abstract base refuses to instantiate).
"""

import logging
from dataclasses import dataclass
from unittest import mock

from django.tasks import default_task_backend, task, task_backends
from django.tasks.exceptions import InvalidTask
from django.test import SimpleTestCase, override_settings

from jobsapp.django_tasks import JobsBackend, JobsTask, PriorityIgnored

from . import tasks as test_tasks
from .helpers import queued_results


class CustomBackend(JobsBackend):
    def __init__(self, alias, params):
        super().__init__(alias, params)
        self.prefix = self.options.get("prefix", "")

    def enqueue(self, *args, **kwargs):
        logger = logging.getLogger(__name__)
        logger.info(f"{self.prefix}Task enqueued.")
        return super().enqueue(*args, **kwargs)  # JobsBackend: and push it


class CustomBackendNoEnqueue(JobsBackend):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomTask(JobsTask):
    foo: int = 3
    bar: int = 300


class CustomTaskBackend(JobsBackend):
    task_class = CustomTask


@override_settings(
    TASKS={
        "default": {
            "BACKEND": f"{CustomBackend.__module__}.{CustomBackend.__qualname__}",
            "OPTIONS": {"prefix": "PREFIX: "},
        },
        "no_enqueue": {
            "BACKEND": f"{CustomBackendNoEnqueue.__module__}.{CustomBackendNoEnqueue.__qualname__}",
        },
    }
)
class CustomBackendTestCase(SimpleTestCase):
    def test_using_correct_backend(self):
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], CustomBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {"prefix": "PREFIX: "})

    @mock.patch.multiple(CustomBackend, supports_async_task=False)
    def test_enqueue_async_task_on_non_async_backend(self):
        with self.assertRaisesMessage(InvalidTask, "Backend does not support async Tasks."):
            default_task_backend.validate_task(test_tasks.noop_task_async)

    def test_backend_does_not_support_priority(self):
        # JobsBackend: accepted and ignored, with a warning (upstream: InvalidTask)
        with self.assertWarnsRegex(PriorityIgnored, "noop_task has priority 10: CustomBackend ignores priorities"):
            self.assertEqual(test_tasks.noop_task.using(priority=10).priority, 10)

    def test_options(self):
        with self.assertLogs(__name__, level="INFO") as captured_logs:
            result = test_tasks.noop_task.enqueue()
        self.assertEqual(len(captured_logs.output), 1)
        self.assertIn("PREFIX: Task enqueued", captured_logs.output[0])
        self.assertEqual(queued_results(), [result])  # JobsBackend: and the job is pushed

    def test_no_enqueue(self):
        # JobsBackend: a subclass without enqueue() inherits JobsBackend's
        no_enqueue_task = test_tasks.noop_task.using(backend="no_enqueue")
        self.assertIsInstance(no_enqueue_task.get_backend(), CustomBackendNoEnqueue)
        self.assertEqual(queued_results(), [])
        result = no_enqueue_task.enqueue()
        self.assertEqual(result.backend, "no_enqueue")


@override_settings(
    TASKS={
        "default": {
            "BACKEND": f"{CustomTaskBackend.__module__}.{CustomTaskBackend.__qualname__}",
            "QUEUES": ["default", "high"],
        },
    }
)
class CustomTaskTestCase(SimpleTestCase):
    def test_custom_task_default_values(self):
        my_task = task()(test_tasks.noop_task.func)

        self.assertIsInstance(my_task, CustomTask)
        self.assertEqual(my_task.foo, 3)
        self.assertEqual(my_task.bar, 300)

    def test_custom_task_with_custom_values(self):
        my_task = task(foo=5, bar=600)(test_tasks.noop_task.func)

        self.assertIsInstance(my_task, CustomTask)
        self.assertEqual(my_task.foo, 5)
        self.assertEqual(my_task.bar, 600)

    def test_custom_task_with_standard_and_custom_values(self):
        # JobsBackend: the priority is accepted with a warning
        with self.assertWarns(PriorityIgnored):
            my_task = task(priority=10, queue_name="high", foo=10, bar=1000)(test_tasks.noop_task.func)

        self.assertIsInstance(my_task, CustomTask)
        self.assertEqual(my_task.priority, 10)
        self.assertEqual(my_task.queue_name, "high")
        self.assertEqual(my_task.foo, 10)
        self.assertEqual(my_task.bar, 1000)
        self.assertFalse(my_task.takes_context)
        self.assertIsNone(my_task.run_after)

    def test_custom_task_invalid_kwarg(self):
        with self.assertRaises(TypeError):
            task(unknown_param=123)(test_tasks.noop_task.func)
