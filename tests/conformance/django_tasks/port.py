"""The port of Django's own ``tests/tasks`` (from the pinned Django sdist) onto JobsBackend.

What changes, and only this (every edit fails loudly if upstream's text moved, upstream.py):

- the package: upstream's ``tests/tasks/`` becomes the top-level package ``django_tasks_suite``
  (Django's runner imports it as ``tasks``, a name Celery's tutorial takes in this run), written
  under the cache (``var/upstream/ported/``) and put on ``sys.path`` and the workers' ``PYTHONPATH``;
  its ``tasks.py`` is upstream's, unchanged;
- the backends: the dummy backend becomes ``RecordingBackend`` and the immediate backend
  ``WorkerRunBackend`` (backends.py: JobsBackend with the dummy backend's ``results``, and with
  ``enqueue`` returning once the suite's real worker ran the job); the custom backends of
  ``test_custom_backend.py`` subclass JobsBackend instead of Django's abstract base;
- where upstream sets a stored result's status by hand, a worker runs the task;
- the cases that assert another backend's refusals (``NotImplementedError`` for ``get_result``,
  ``InvalidTask`` for ``run_after`` and for a priority, ``KeyboardInterrupt`` out of ``enqueue``,
  an abstract ``enqueue``) are replaced by ours asserting what JobsBackend does instead, each
  listed in docs/django-tasks.md.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.conformance import upstream
from tests.conformance.upstream import Definition, Edit, Substitution

PACKAGE = "django_tasks_suite"
UPSTREAM_DIR = "tests/tasks"
BACKENDS = "tests.conformance.django_tasks.backends"

_TO_RECORDING = [
    Substitution(
        "from django.tasks.backends.dummy import DummyBackend",
        f"from {BACKENDS} import RecordingBackend as DummyBackend",
        reason="the dummy backend's tests run on JobsBackend (its results read back from Redis)",
    ),
    Substitution('"django.tasks.backends.dummy.DummyBackend"', f'"{BACKENDS}.RecordingBackend"', count=None),
]

_TO_WORKER_RUN = [
    Substitution(
        "from django.tasks.backends.immediate import ImmediateBackend",
        f"from {BACKENDS} import WorkerRunBackend as ImmediateBackend",
        reason="the immediate backend's tests run on JobsBackend and a real worker",
    ),
    Substitution('"django.tasks.backends.immediate.ImmediateBackend"', f'"{BACKENDS}.WorkerRunBackend"', count=None),
]

#: One edit list per upstream file of tests/tasks/ (the names are upstream's).
EDITS: dict[str, list[Edit]] = {
    "__init__.py": [],
    "tasks.py": [],
    "test_tasks.py": [
        *_TO_RECORDING,
        Substitution('"tasks.tasks.', f'"{PACKAGE}.tasks.', count=2, reason="the package's name here"),
    ],
    "test_dummy_backend.py": [
        *_TO_RECORDING,
        Substitution("from . import tasks as test_tasks", f"from . import tasks as test_tasks\nfrom {BACKENDS} import run_queued_tasks"),
        Substitution(
            'object.__setattr__(enqueued_result, "status", TaskResultStatus.SUCCESSFUL)',
            "run_queued_tasks(enqueued_result)",
            count=2,
            reason="a stored result changes when a worker runs the task, not by hand",
        ),
    ],
    "test_immediate_backend.py": [
        *_TO_WORKER_RUN,
        Definition(
            "ImmediateBackendTestCase.test_throws_keyboard_interrupt",
            """
            def test_throws_keyboard_interrupt(self):
                # On a worker, KeyboardInterrupt in a task is that task's failure; the worker goes on
                result = default_task_backend.enqueue(test_tasks.failing_task_keyboard_interrupt, [], {})
                self.assertEqual(result.status, TaskResultStatus.FAILED)
                self.assertEqual(result.errors[0].exception_class, KeyboardInterrupt)
                self.assertEqual(test_tasks.calculate_meaning_of_life.enqueue().return_value, 42)
            """,
            reason="the immediate backend re-raises KeyboardInterrupt in the caller",
        ),
        Definition(
            "ImmediateBackendTestCase.test_cannot_get_result",
            """
            async def test_cannot_get_result(self):
                # JobsBackend reads results back; an unknown id is TaskResultDoesNotExist
                from django.tasks.exceptions import TaskResultDoesNotExist

                with self.assertRaises(TaskResultDoesNotExist):
                    await default_task_backend.aget_result("123")
                result = await default_task_backend.aenqueue(test_tasks.calculate_meaning_of_life, (), {})
                self.assertEqual((await default_task_backend.aget_result(result.id)).return_value, 42)
            """,
            reason="the immediate backend cannot read results back",
        ),
        Definition(
            "ImmediateBackendTestCase.test_cannot_refresh_result",
            """
            async def test_cannot_refresh_result(self):
                # JobsBackend refreshes a result to the worker's outcome
                result = await default_task_backend.aenqueue(test_tasks.calculate_meaning_of_life, (), {})
                await result.arefresh()
                self.assertEqual(result.return_value, 42)
                result.refresh()
                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
            """,
            reason="the immediate backend cannot refresh results",
        ),
        Definition(
            "ImmediateBackendTestCase.test_cannot_pass_run_after",
            """
            def test_cannot_pass_run_after(self):
                # JobsBackend supports run_after: the task runs, not before it
                import datetime

                run_after = timezone.now() + datetime.timedelta(seconds=1)
                task = test_tasks.calculate_meaning_of_life.using(run_after=run_after)
                default_task_backend.validate_task(task)
                result = task.enqueue()
                self.assertEqual(result.return_value, 42)
                self.assertGreaterEqual(result.started_at, run_after)
            """,
            reason="the immediate backend refuses run_after",
        ),
    ],
    "test_custom_backend.py": [
        Substitution(
            "from django.tasks.backends.base import BaseTaskBackend",
            "from jobsapp.django_tasks import JobsBackend as BaseTaskBackend, JobsTask as Task",
            reason="the custom backends extend JobsBackend, as a project extending it would",
        ),
        Substitution("from django.tasks import Task, default_task_backend", "from django.tasks import default_task_backend"),
        Substitution(
            'logger.info(f"{self.prefix}Task enqueued.")',
            'logger.info(f"{self.prefix}Task enqueued.")\n        return super().enqueue(*args, **kwargs)',
            reason="and the job is pushed",
        ),
        Definition(
            "CustomTaskBackend.enqueue",
            "",
            reason="JobsBackend's enqueue, not a no-op",
        ),
        Definition(
            "CustomBackendTestCase.test_backend_does_not_support_priority",
            """
            def test_backend_does_not_support_priority(self):
                # JobsBackend supports priorities, and a backend extending it inherits them
                self.assertTrue(default_task_backend.supports_priority)
                self.assertEqual(test_tasks.noop_task.using(priority=10).priority, 10)
            """,
            reason="JobsBackend supports priorities; Django's base refuses them from a backend without (InvalidTask)",
        ),
        Definition(
            "CustomBackendTestCase.test_no_enqueue",
            """
            def test_no_enqueue(self):
                # A subclass without enqueue() inherits JobsBackend's: a working backend
                result = test_tasks.noop_task.using(backend="no_enqueue").enqueue()
                self.assertEqual(result.backend, "no_enqueue")
                self.assertEqual(task_backends["no_enqueue"].get_result(result.id), result)
            """,
            reason="Django's abstract base refuses to instantiate without enqueue()",
        ),
    ],
}


STANDINS = "tests.conformance.django_tasks.rq_standins"

#: django-tasks-rq's tests/tests.py: RQ, django-rq and fakeredis stood in (rq_standins.py), RQ's
#: in-process burst worker a real one (backends.run_burst_worker), the tasks module Django's (the
#: sdist does not ship django-tasks-rq's; its messages say "task" where Django's say "Task").
RQ_EDITS: list[Edit] = [
    Substitution("import django_rq\n", f"from {STANDINS} import get_queue\n"),
    Substitution("from django_tasks import", "from django.tasks import", reason="django.tasks is Django's now"),
    Substitution("from django_tasks.base import", "from django.tasks.base import"),
    Substitution("from django_tasks.exceptions import InvalidTaskError,", "from django.tasks.exceptions import InvalidTask,"),
    Substitution("InvalidTaskError", "InvalidTask", count=2),
    Substitution("from fakeredis import FakeRedis, FakeStrictRedis\n", ""),
    Substitution(
        "from rq.defaults import UNSERIALIZABLE_RETURN_VALUE_PAYLOAD",
        "UNSERIALIZABLE_RETURN_VALUE_PAYLOAD = 'Unsupported type'  # Django's error for a value JSON cannot hold",
    ),
    Substitution("from rq.timeouts import TimerDeathPenalty\n", ""),
    Substitution("from django_tasks_rq import compat\n", ""),
    Substitution("from django_tasks_rq.backend import Job, RQBackend", f"from {STANDINS} import TASKS, Job, RQBackend, jobsapp_settings"),
    Substitution("from tests import tasks as test_tasks", f"from {PACKAGE} import tasks as test_tasks"),
    Substitution('"django_tasks_rq.RQBackend"', '"jobsapp.django_tasks.JobsBackend"', count=None),
    Substitution("django_rq.get_queue(", "get_queue(", count=None),
    Substitution(
        'assertLogs("django_tasks"', 'assertLogs("django.tasks"', count=None, reason="the logger of django.tasks, not of the backport"
    ),
    Substitution('"This task failed due to ValueError"', '"This Task failed due to ValueError"'),
    Substitution('"This task failed due to SystemExit"', '"This Task failed due to SystemExit"'),
    Substitution(
        "self.assertEqual(result.errors[0].exception_class, Exception)",
        "self.assertEqual(result.errors[0].exception_class, TypeError)",
        reason="a return value JSON cannot hold is Django's TypeError (RQ: its own payload)",
    ),
    Substitution(
        "class RQBackendTestCase(SimpleTestCase):",
        "@override_settings(TASKS=TASKS, JOBSAPP=jobsapp_settings())\nclass RQBackendTestCase(SimpleTestCase):",
        reason="the settings django-tasks-rq's test settings give (the sdist does not ship them)",
    ),
    Definition("get_fake_connection", "", reason="fakeredis: the tests run on the test Redis"),
    Definition(
        "RQBackendTestCase.setUp",
        """
        def setUp(self) -> None:
            super().setUp()  # the test Redis is emptied before every test; so is what the backend recorded
            default_task_backend.clear()
        """,
    ),
    Definition(
        "RQBackendTestCase.run_worker",
        """
        def run_worker(self) -> None:
            # A real worker, in burst: it runs what this test enqueued, then stops
            from tests.conformance.django_tasks.backends import run_burst_worker

            run_burst_worker(default_task_backend, ["default", "queue-1"])
        """,
    ),
    Definition(
        "RQBackendTestCase.test_invalid_task_path",
        """
        def test_invalid_task_path(self) -> None:
            # A job that is no task of this backend has no result (RQ: SuspiciousOperation)
            job = get_queue("default", job_class=Job).enqueue_call("subprocess.check_output", args=["exit", "1"])
            with self.assertRaises(TaskResultDoesNotExist):
                default_task_backend.get_result(job.id)
        """,
        reason="RQ raises SuspiciousOperation",
    ),
    Substitution(
        'self.assertIn("django_rq", errors[0].hint)',
        """self.assertIn('Add "jobsapp" to INSTALLED_APPS', errors[0].hint)""",
        reason="the app the backend needs is jobsapp",
    ),
    Definition(
        "RQBackendTestCase.test_uses_rq_queues_for_queue_names",
        """
        @override_settings(TASKS={"default": {"BACKEND": "jobsapp.django_tasks.JobsBackend", "QUEUES": []}})
        def test_uses_rq_queues_for_queue_names(self) -> None:
            # QUEUES [] accepts every queue (RQ fills it in from RQ_QUEUES)
            self.assertEqual(default_task_backend.queues, set())
            self.assertEqual(test_tasks.noop_task.using(queue_name="queue-7").queue_name, "queue-7")
        """,
        reason="RQ takes the queue names from RQ_QUEUES",
    ),
    Substitution(
        "\"Add 'queue-2' to RQ_QUEUES\"",
        "\"add them to JOBSAPP['QUEUES']\"",
        reason="the queues a worker runs are JOBSAPP['QUEUES']",
    ),
    Definition(
        "RQBackendTestCase.test_exception_classes_pop_empty_list_bug",
        """
        def test_exception_classes_pop_empty_list_bug(self) -> None:
            # A failed result whose recorded exception is gone still reads back (RQ: job meta)
            from jobsapp import keys
            from jobsapp.connection import get_redis

            result = test_tasks.failing_task_value_error.enqueue()
            self.run_worker()
            get_redis().hdel(keys.result(result.id), "error_class", "error_message", "error_traceback")
            task_result = default_task_backend.get_result(result.id)
            self.assertEqual(task_result.status, TaskResultStatus.FAILED)
            self.assertEqual(task_result.task, test_tasks.failing_task_value_error)
            self.assertEqual(task_result.errors[0].exception_class_path, "builtins.Exception")
        """,
        reason="RQ keeps the exception classes in its job meta",
    ),
    Definition("CompatTestCase", "", reason="the django-tasks package's own compatibility shim"),
]


def ported_root() -> Path:
    """The directory holding the ported package (put it on ``sys.path``); skips or fails as
    ``upstream.require`` does when the sdist cannot be had."""
    root = upstream.require(upstream.DJANGO)
    files = {
        f"{PACKAGE}/{name}": upstream.port(upstream.read(root, f"{UPSTREAM_DIR}/{name}"), edits, origin=f"django {UPSTREAM_DIR}/{name}")
        for name, edits in EDITS.items()
    }
    rq_root = upstream.require(upstream.DJANGO_TASKS_RQ)
    files[f"{PACKAGE}/test_rq_backend.py"] = upstream.port(
        upstream.read(rq_root, "tests/tests.py"), RQ_EDITS, origin="django-tasks-rq tests/tests.py"
    )
    return upstream.materialize("django-tasks", files)


def ported_on_path() -> None:
    """Port the suite (once per content) and make it importable here and in the workers."""
    directory = str(ported_root())
    if directory not in sys.path:
        sys.path.insert(0, directory)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [directory, os.environ.get("PYTHONPATH")]))
