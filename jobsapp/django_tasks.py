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
async lane, ``jobsapp.aio``, under the job's ``timeout``), and sends ``task_finished`` on success, and on a failure that will not be
retried. What becomes of a failed task is the engine's: by default (``RETRY: 0``) it goes
straight to the dead set (the operator can retry it from the dashboard) and its result says
FAILED; ``RETRY: n`` retries it n times with Sidekiq's backoff (READY meanwhile).

Priorities are not supported (``supports_priority`` is False, so Django refuses a priority other
than the default): the engine orders work by queue, and a queue per priority would be a lie about
ordering within a queue. Only the last error of a task is kept (``errors`` has at most one).
"""

from __future__ import annotations

import datetime as dt
import inspect
import threading
from typing import TYPE_CHECKING, Any

try:
    from django.tasks import TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError as exc:  # Django < 6.0 has no django.tasks: the backend is not offered
    raise ImportError("jobsapp.django_tasks needs Django 6.0 or later (django.tasks); this is an older Django") from exc

from django.core import checks
from django.utils.json import normalize_json

from . import aio, results, timeouts
from .conf import jobs_settings
from .functions import FunctionJob, dotted_path, job_class_for
from .payload import now

if TYPE_CHECKING:
    from collections.abc import Callable


#: Payload extras of a django.tasks job: the backend alias and whether it takes a context.
BACKEND_KEY = "django_task_backend"
CONTEXT_KEY = "django_task_takes_context"

DEFAULT_OPTIONS: dict[str, Any] = {
    "RETRY": 0,  # 0: a failure is FAILED at once (dead set); n: n retries with Sidekiq's backoff
    "RETAIN_SECONDS": 24 * 3600,  # how long results (and get_result) stay available
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
        from .retry import retry_limit

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
                import traceback

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
            from . import registry

            job_class = registry.lookup(name)
            if issubclass(job_class, TaskJob):
                return job_class
        _tasks[name] = task
    return job_class_for(task.func, base=TaskJob, attributes={"task": task})


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
    supports_async_task = True  # awaited on the worker's event loop (jobsapp.aio)
    supports_get_result = True
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.options = {**DEFAULT_OPTIONS, **self.options}

    # --- producing ---------------------------------------------------------------------

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        self.validate_task(task)
        job_class = _register(task)
        options: dict[str, Any] = {
            "queue": task.queue_name,
            "retry": self.options["RETRY"],
            "retain": self.options["RETAIN_SECONDS"],
            BACKEND_KEY: self.alias,
            # Django's task backends enqueue at once (its docs: wrap enqueue in on_commit yourself)
            "on_commit": False,
        }
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
        timestamp = _datetime(now())
        task_result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=jid,
            status=TaskResultStatus.READY,
            enqueued_at=timestamp,
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
        task_result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=record.jid,
            status=_STATUSES.get(record.status, TaskResultStatus.READY),
            enqueued_at=_datetime(record.enqueued_at or record.created_at),
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
        from django.apps import apps

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
        retry = self.options.get("RETRY")
        if type(retry) is not int or retry < 0:
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['RETRY'] is {retry!r}.",
                    hint="Use 0 (a failure is final, the default) or a number of retries.",
                    id="jobsapp.E203",
                )
            )
        retain = self.options.get("RETAIN_SECONDS")
        if isinstance(retain, bool) or not isinstance(retain, (int, float)) or retain <= 0:
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['RETAIN_SECONDS'] is {retain!r}.",
                    hint="Use a positive number of seconds: results are kept that long after a task's last change.",
                    id="jobsapp.E204",
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
