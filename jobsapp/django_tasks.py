"""A ``django.tasks`` backend (Django 6.0+) that runs tasks on the engine's workers.

    TASKS = {"default": {"BACKEND": "jobsapp.django_tasks.JobsBackend",
                         "QUEUES": ["default", "mail"],
                         "OPTIONS": {"RETRY": 0, "RETAIN_SECONDS": 86400}}}

Producing side (any thread): ``enqueue`` validates the task (Django's rules), pushes a Sidekiq
item through ``jobsapp.client`` (``run_after`` goes to the ``schedule`` set) with ``retain`` set,
so the result store (``jobsapp.results``) keeps the task's status, times, workers, errors and
return value, and sends ``task_enqueued``. ``get_result`` reads that record back as a
``TaskResult`` (``TaskResultDoesNotExist`` when there is none, or it is not one of this backend's
tasks).

Consuming side (a processor thread of ``runworkers``): every ``@task`` function is registered as
a job when it is defined (``JobsBackend.task_class``), under its dotted path; ``tasks.py`` of
every app is autodiscovered, so only functions defined there (or in code they import) ever run.
The job builds the ``TaskResult`` Django's signals carry, sends ``task_started``, calls the
function (with a ``TaskContext`` whose ``attempt`` is the attempt number when the task takes
context; a coroutine function makes an async job, awaited on the worker's event loop in its
async lane, ``jobsapp.worker.aio``, under the job's ``timeout``), and sends ``task_finished`` on success, and on a failure that will not be
retried. What becomes of a failed task is the engine's: by default (``RETRY: 0``) it goes
straight to the dead set (the operator can retry it from the dashboard) and its result says
FAILED; ``RETRY: n`` retries it n times with Sidekiq's backoff (READY meanwhile).

Priorities are honoured as Django defines them: a task's ``priority`` (-100..100, higher
first, 0 the default) becomes the job's ``priority`` (``jobsapp.priority``), so within a queue
the tasks of a higher priority run first, and those of one priority in order of arrival
(``supports_priority`` is True). A task of priority 0 is a plain job in Sidekiq's layout.

``enqueue`` returns the result ``get_result`` reads back: ``enqueued_at`` is the push's
``created_at`` (stamped before the push, stored with the job's record, and unchanged by retries
or the scheduler), and the task carries the queue and ``run_after`` it was enqueued with (a
``run_after`` already past runs at once and reads back as None; an ignored priority is not
stored, so the declared one reads back). The backend's ``options`` are the ``OPTIONS`` given in
settings (defaults are read, not merged in).
Only the last error of a task is kept (``errors`` has at most one).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import threading
import traceback
from typing import TYPE_CHECKING, Any

try:
    from django.tasks import TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import DEFAULT_TASK_PRIORITY, Task, TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError as exc:  # Django < 6.0 has no django.tasks: the backend is not offered
    raise ImportError("jobsapp.django_tasks needs Django 6.0 or later (django.tasks); this is an older Django") from exc

from django.apps import apps
from django.core import checks
from django.utils.json import normalize_json

from . import priority, registry, results
from .conf import jobs_settings
from .functions import FunctionJob, dotted_path, job_class_for
from .payload import now
from .worker import aio, timeouts
from .worker.retry import retry_limit

if TYPE_CHECKING:
    from collections.abc import Callable


#: Payload extras of a django.tasks job: the backend alias and whether it takes a context.
BACKEND_KEY = "django_task_backend"
CONTEXT_KEY = "django_task_takes_context"

DEFAULT_OPTIONS: dict[str, Any] = {
    "RETRY": 0,  # 0: a failure is FAILED at once (dead set); n: n retries with Sidekiq's backoff
    "RETAIN_SECONDS": 24 * 3600,  # how long results (and get_result) stay available
    # Django's backends enqueue at once, inside a transaction too; True waits for the commit
    # there (through the transactional outbox when JOBSAPP["OUTBOX"] is on), as Job.perform_async.
    "ENQUEUE_ON_COMMIT": False,
}

_lock = threading.Lock()
#: wire name -> the Task defined with @task for that function (the first one; using() copies share it)
_tasks: dict[str, Task[Any, Any]] = {}

_STATUSES = {
    results.QUEUED: TaskResultStatus.READY,
    results.SCHEDULED: TaskResultStatus.READY,
    results.RETRYING: TaskResultStatus.READY,
    results.RUNNING: TaskResultStatus.RUNNING,
    results.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    results.FAILED: TaskResultStatus.FAILED,
}


def _datetime(epoch: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC) if epoch is not None else None


def _exception_path(error_class: str) -> str:
    """Django's ``exception_class_path``: a builtin's bare name becomes ``builtins.Name``."""
    return error_class if "." in error_class else f"builtins.{error_class}"


class TaskJob(FunctionJob):
    """The engine job that runs one ``@task`` function, sending Django's task signals around it."""

    abstract = True
    task: Any  # the django.tasks Task (a ClassVar, set per function)

    def perform(self, *args: Any, **kwargs: Any) -> Any:
        task: Task[Any, Any] = type(self).task
        alias = str(self.item.get(BACKEND_KEY) or task.backend)
        backend_class = type(task.get_backend()) if alias == task.backend else JobsBackend
        attempt = results.attempt_number(self.item)
        started = dt.datetime.fromtimestamp(now(), tz=dt.UTC)
        record = results.get(self.jid) if attempt > 1 else None  # earlier attempts' start and workers
        first_started = _datetime(record.started_at) if record is not None and record.started_at else started
        worker = results.worker_name()
        task_result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=self.jid,
            status=TaskResultStatus.RUNNING,
            enqueued_at=_datetime(self.item.get("enqueued_at")),
            started_at=first_started,
            finished_at=None,
            last_attempted_at=started,
            args=list(args),
            kwargs=dict(kwargs),
            backend=alias,
            errors=[],
            worker_ids=[*(record.worker_ids if record is not None else [])[: attempt - 1], worker],
        )
        task_started.send(sender=backend_class, task_result=task_result)
        try:
            # an async task's coroutine is awaited on this worker's loop (Task.call would start a loop of its own)
            call = task.func if type(self).is_async else task.call
            if self.item.get(CONTEXT_KEY):
                value = call(TaskContext(task_result=task_result), *args, **kwargs)
            else:
                value = call(*args, **kwargs)
            if inspect.iscoroutine(value):
                value = aio.run(value, timeout_seconds=timeouts.timeout_seconds(self.item))
            value = normalize_json(value)
        except BaseException as exc:  # re-raised: the engine retries or buries the job as configured
            count = self.item["retry_count"] + 1 if isinstance(self.item.get("retry_count"), int) else 0
            if self.item.get("retry") is False or count >= retry_limit(self.item):
                object.__setattr__(task_result, "status", TaskResultStatus.FAILED)
                object.__setattr__(task_result, "finished_at", dt.datetime.fromtimestamp(now(), tz=dt.UTC))
                kind = type(exc)
                task_result.errors.append(
                    TaskError(
                        exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
                        traceback="".join(traceback.format_exception(exc)),
                    )
                )
                task_finished.send(sender=backend_class, task_result=task_result)
            raise
        object.__setattr__(task_result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(task_result, "finished_at", dt.datetime.fromtimestamp(now(), tz=dt.UTC))
        object.__setattr__(task_result, "_return_value", value)
        task_finished.send(sender=backend_class, task_result=task_result)
        return value


def _register(task: Task[Any, Any]) -> type[FunctionJob]:
    """The job class of ``task``'s function, defined and registered on first sight."""
    name = dotted_path(task.func)
    with _lock:
        if name in _tasks and _tasks[name].func is task.func:
            job_class = registry.lookup(name)
            if issubclass(job_class, TaskJob):
                return job_class
        _tasks[name] = task
    return job_class_for(task.func, base=TaskJob, attributes={"task": task})


def _copy(task: Task[Any, Any], **changes: Any) -> Task[Any, Any]:
    """``task`` with ``changes``, made without validating (or registering) it again: what
    ``Task.using`` makes, for a task that was valid when it was enqueued."""
    copy: Task[Any, Any] = object.__new__(type(task))
    for field in dataclasses.fields(task):
        object.__setattr__(copy, field.name, changes.get(field.name, getattr(task, field.name)))
    return copy


if TYPE_CHECKING:
    _TaskBase = Task[Any, Any]  # generic in django-stubs only
else:
    _TaskBase = Task


class JobsTask(_TaskBase):
    """Django's Task, registered as an engine job when defined (``@task`` in a ``tasks.py``)."""

    __slots__ = ()

    def __post_init__(self) -> None:
        Task.__post_init__(self)  # Django's validate_task call
        _register(self)


class JobsBackend(BaseTaskBackend):
    """``django.tasks`` on jobsapp's workers: see the module docstring."""

    task_class = JobsTask
    supports_defer = True
    supports_async_task = True  # awaited on the worker's event loop (jobsapp.worker.aio)
    supports_get_result = True
    supports_priority = True  # within a queue (jobsapp.priority)

    def option(self, name: str) -> Any:
        """An ``OPTIONS`` value, or its default (``options`` itself is kept as given)."""
        return self.options.get(name, DEFAULT_OPTIONS[name])

    # --- producing ---------------------------------------------------------------------

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        self.validate_task(task)
        job_class = _register(task)
        # stamped before the push and stored with the job (created_at), so get_result reads it back
        timestamp = now()
        options: dict[str, Any] = {
            "queue": task.queue_name,
            "retry": self.option("RETRY"),
            "retain": self.option("RETAIN_SECONDS"),
            "created_at": timestamp,
            BACKEND_KEY: self.alias,
            # Django's task backends enqueue at once (its docs: wrap enqueue in on_commit yourself)
            # unless OPTIONS["ENQUEUE_ON_COMMIT"] asks to wait for the commit
            "on_commit": self.option("ENQUEUE_ON_COMMIT") is True,
        }
        if task.priority != DEFAULT_TASK_PRIORITY:
            options[priority.PRIORITY_KEY] = task.priority
        if task.takes_context:
            options[CONTEXT_KEY] = True
        args_list: list[Any] = list(normalize_json(list(args)))  # type: ignore[arg-type]  # a list stays a list
        kwargs_dict: dict[str, Any] = dict(normalize_json(dict(kwargs)))  # type: ignore[arg-type]  # a dict stays a dict
        setter = job_class.set(**options)
        if task.run_after is not None:
            jid = setter.perform_at(task.run_after, *args_list, **kwargs_dict)
        else:
            jid = setter.perform_async(*args_list, **kwargs_dict)
        if jid is None:
            raise RuntimeError("a client middleware stopped the push of this task; nothing was enqueued")
        task_result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=jid,
            status=TaskResultStatus.READY,
            enqueued_at=_datetime(timestamp),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args_list,
            kwargs=kwargs_dict,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=task_result)
        return task_result

    # --- reading -----------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        record = results.get(result_id) if isinstance(result_id, str) else None
        task = _tasks.get(record.job_class) if record is not None else None
        if record is None or task is None:
            raise TaskResultDoesNotExist(result_id)
        errors = []
        if record.error_class:  # the last error only, from whichever attempt raised it
            errors.append(TaskError(exception_class_path=_exception_path(record.error_class), traceback=record.error_traceback))
        elif record.failed:  # failed with no exception recorded (e.g. expired): say why, as an Exception
            errors.append(TaskError(exception_class_path="builtins.Exception", traceback=record.error_message or record.reason))
        # the task as it was enqueued: its queue and run_after (its priority as declared)
        run_after = _datetime(record.scheduled_at)
        if record.queue != task.queue_name or run_after != task.run_after or self.alias != task.backend:
            task = _copy(task, queue_name=record.queue, run_after=run_after, backend=self.alias)
        task_result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=record.jid,
            status=_STATUSES.get(record.status, TaskResultStatus.READY),
            # when enqueue() pushed it: created_at (enqueued_at is stamped again by every requeue)
            enqueued_at=_datetime(record.created_at if record.created_at is not None else record.enqueued_at),
            started_at=_datetime(record.started_at),
            finished_at=_datetime(record.finished_at) if record.ready else None,
            last_attempted_at=_datetime(record.last_attempted_at),
            args=record.args,
            kwargs=record.kwargs,
            backend=self.alias,
            errors=errors,
            worker_ids=record.worker_ids,
        )
        if record.succeeded:
            object.__setattr__(task_result, "_return_value", record.value)
        return task_result

    # --- checks ------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        messages: list[checks.CheckMessage] = []
        if not apps.is_installed("jobsapp"):
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}] uses jobsapp.django_tasks.JobsBackend but jobsapp is not in INSTALLED_APPS.",
                    hint='Add "jobsapp" to INSTALLED_APPS so tasks.py modules are autodiscovered and workers can run them.',
                    id="jobsapp.E201",
                )
            )
        unknown = sorted(set(self.options) - set(DEFAULT_OPTIONS))
        if unknown:
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS'] has unknown key(s): {', '.join(unknown)}.",
                    hint=f"Known options: {', '.join(sorted(DEFAULT_OPTIONS))}.",
                    id="jobsapp.E202",
                )
            )
        retry = self.option("RETRY")
        if type(retry) is not int or retry < 0:
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['RETRY'] is {retry!r}.",
                    hint="Use 0 (a failure is final, the default) or a number of retries.",
                    id="jobsapp.E203",
                )
            )
        retain = self.option("RETAIN_SECONDS")
        if isinstance(retain, bool) or not isinstance(retain, (int, float)) or retain <= 0:
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['RETAIN_SECONDS'] is {retain!r}.",
                    hint="Use a positive number of seconds: results are kept that long after a task's last change.",
                    id="jobsapp.E204",
                )
            )
        if not isinstance(self.option("ENQUEUE_ON_COMMIT"), bool):
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['ENQUEUE_ON_COMMIT'] is {self.option('ENQUEUE_ON_COMMIT')!r}.",
                    hint="Use False (enqueue at once, Django's default) or True (wait for the transaction's commit).",
                    id="jobsapp.E205",
                )
            )
        worker_queues = set(jobs_settings.QUEUES)
        missing = sorted(self.queues - worker_queues) if self.queues else []
        if missing:
            messages.append(
                checks.Warning(
                    f"TASKS[{self.alias!r}]['QUEUES'] has queue(s) {', '.join(missing)} that JOBSAPP['QUEUES'] does not list.",
                    hint="Start runworkers with -q for them, or add them to JOBSAPP['QUEUES'], or their tasks never run.",
                    id="jobsapp.W201",
                )
            )
        return messages


def registered_tasks() -> dict[str, Callable[..., Any]]:
    """Wire name -> function of every django.tasks task this process has seen defined."""
    with _lock:
        return {name: task.func for name, task in _tasks.items()}
