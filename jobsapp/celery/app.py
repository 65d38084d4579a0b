"""``Celery``: the application object of a Celery project, reduced to what code calls on it.

``app = Celery("proj")`` and ``@app.task`` keep working after the import change; ``send_task``
pushes a task by name for workers that define it (the caller does not need its code), as
Celery's does. Configuration is Django's and the engine's (``JOBSAPP``): ``config_from_object``
and the broker/backend arguments are accepted and ignored with a one-time warning, and
``autodiscover_tasks`` has nothing to do (``tasks.py`` of every installed app is imported).

``app.conf`` is a dict that also answers attributes (``app.conf.beat_schedule = {...}``,
``app.conf.update(...)``). Two settings are read: ``beat_schedule`` (with ``timezone``) is handed
to the engine's periodic scheduler as soon as it is set (schedules.py); the others are kept and
not used.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.utils.module_loading import import_string

from .. import client
from . import task as task  # ``from celery.app import task`` (the module), as the tasks guide imports it
from .control import revoke
from .decorators import TaskDecorator, shared_task
from .options import check_options, warn_unsupported
from .result import AsyncResult
from .result import AsyncResult as _AsyncResult  # the class, where a method named AsyncResult shadows it
from .schedules import declare_beat_schedule
from .task import ENGINE_RETRY_LIMIT, EXPIRES_KEY, RESULT_EXPIRES_SECONDS, _epoch, _jsonable, _tasks
from .task import Task as _Task  # the class, where an attribute named Task shadows it

#: The ``app.conf`` settings that change what runs (the others are kept, unused).
_SCHEDULE_SETTINGS = frozenset({"beat_schedule", "timezone"})


class _Control:
    """``app.control``: only ``revoke`` (waiting tasks; running ones too with ``terminate=True``)."""

    @staticmethod
    def revoke(task_id: str | list[str], *, terminate: bool = False, **options: Any) -> int:
        return revoke(task_id, terminate=terminate, **options)


class Settings(dict[str, Any]):
    """``app.conf``: Celery's settings by key or attribute; ``beat_schedule`` feeds the periodic scheduler."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __setitem__(self, name: str, value: Any) -> None:
        super().__setitem__(name, value)
        if name in _SCHEDULE_SETTINGS:
            self._declare_schedule()

    def update(self, *args: Any, **kwargs: Any) -> None:
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def setdefault(self, name: str, default: Any = None) -> Any:
        if name not in self:
            self[name] = default
        return self[name]

    def _declare_schedule(self) -> None:
        """Hand ``beat_schedule`` to the periodic scheduler (ImproperlyConfigured for what it cannot run)."""
        beat_schedule = self.get("beat_schedule")
        if beat_schedule is not None:
            timezone = self.get("timezone")
            declare_beat_schedule(beat_schedule, timezone=str(timezone) if timezone else None)


class Celery:
    """A stand-in for ``celery.Celery`` in a project that moved to jobsapp."""

    #: The base class of tasks (``class MyTask(app.Task)``).
    Task: type[_Task[Any, Any]] = _Task

    def __init__(
        self,
        main: str | None = None,
        *args: Any,
        task_cls: str | type[_Task[Any, Any]] | None = None,
        include: Sequence[str] | None = None,
        **options: Any,
    ) -> None:
        self.main = main
        self.conf = Settings()
        self.control = _Control()
        #: The default base of this app's tasks: a Task subclass, or its "module:Class" path (read at the first @app.task).
        self.task_cls = task_cls
        renamed = type(self).gen_task_name is not Celery.gen_task_name
        if renamed or task_cls is not None:
            self.task = TaskDecorator(
                namer=self.gen_task_name if renamed else None, default_base=self._task_base if task_cls is not None else None
            )
        if include:
            warn_unsupported(
                "Celery(include=...)",
                "runworkers imports the tasks.py of every installed app: put these modules in an app's tasks.py or import them there",
            )
        if args or options:
            warn_unsupported("Celery(broker=..., backend=..., ...)", "Redis and results are JOBSAPP settings")

    def _task_base(self) -> type[_Task[Any, Any]]:
        """``task_cls``, imported when it is a ``"module:Class"`` path; TypeError unless a Task subclass."""
        base: Any = self.task_cls
        if isinstance(base, str):
            dotted_path = base.replace(":", ".")
            base = import_string(dotted_path)  # the user's own code names it, as in Celery; never a payload
        if not (isinstance(base, type) and issubclass(base, _Task)):
            raise TypeError(f"Celery(task_cls=...) must be a subclass of jobsapp.celery.Task or its 'module:Class' path, not {base!r}")
        return base

    #: ``@app.task``, ``@app.task()``, ``@app.task(bind=True, base=..., ...)``: ``shared_task``,
    #: naming tasks with ``gen_task_name`` (set per instance, below).
    task: TaskDecorator = shared_task

    def gen_task_name(self, name: str, module: str) -> str:
        """A task's default name: ``module.name`` (a subclass may override it, as Celery's)."""
        return f"{module}.{name}"

    def register_task(self, task: Any, **options: Any) -> Any:
        """Refused: a class-based task (a ``Task`` subclass defining ``run``) is not supported;
        decorate a function, with ``base=`` for shared behaviour."""
        raise TypeError(
            "app.register_task() is not supported by jobsapp.celery: define the task with @app.task / @shared_task "
            "on a module-level function (base=YourTaskClass for shared attributes and handlers)"
        )

    @property
    def tasks(self) -> dict[str, _Task[Any, Any]]:
        """The tasks defined in this process, by name (a copy)."""
        return dict(_tasks)

    def config_from_object(self, obj: Any, silent: bool = False, force: bool = False, namespace: str | None = None) -> None:
        warn_unsupported("config_from_object", "Celery settings are not read: see docs/celery.md's migration guide")

    def autodiscover_tasks(self, packages: Any = None, related_name: str = "tasks", force: bool = False) -> None:
        """Nothing to do: jobsapp imports every installed app's ``tasks.py`` at start-up."""

    def AsyncResult(self, task_id: str, **kwargs: Any) -> _AsyncResult[Any]:
        return AsyncResult(task_id)

    def send_task(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        countdown: float | None = None,
        eta: dt.datetime | None = None,
        task_id: str | None = None,
        expires: float | dt.datetime | None = None,
        *,
        queue: str | None = None,
        ignore_result: bool = False,
        **options: Any,
    ) -> _AsyncResult[Any]:
        """Push task ``name`` for the workers that define it; this process needs not."""
        check_options(options, where="send_task()")
        item: dict[str, Any] = {"class": name, "args": _jsonable(list(args or ())), "retry": ENGINE_RETRY_LIMIT}
        if kwargs:
            item["kwargs"] = _jsonable(dict(kwargs))
        if queue:
            item["queue"] = queue
        if task_id:
            item["jid"] = task_id
        if not ignore_result:
            item["retain"] = RESULT_EXPIRES_SECONDS
        if expires is not None:
            item[EXPIRES_KEY] = _epoch(expires) if isinstance(expires, dt.datetime) else _epoch(dt.datetime.now(dt.UTC)) + float(expires)
        if eta is not None:
            item["at"] = _epoch(eta)
        elif countdown:
            item["at"] = _epoch(dt.datetime.now(dt.UTC)) + float(countdown)
        jid = client.push(item)
        if jid is None:
            raise RuntimeError(f"a client middleware stopped the push of {name}; nothing was enqueued")
        return AsyncResult(jid, task_name=name)
