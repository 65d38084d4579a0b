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

import copy
import datetime as dt
from collections.abc import Sequence
from typing import Any

from django.utils.module_loading import import_string

from . import current
from . import task as task  # ``from celery.app import task`` (the module), as the tasks guide imports it
from .canvas import HONOURED_OPTIONS, push_by_name
from .control import Control
from .decorators import TaskDecorator, shared_task
from .exceptions import NotProvided
from .lineage import request_fields
from .options import check_options, warn_unsupported
from .result import AsyncResult, ResultBackend
from .result import AsyncResult as _AsyncResult  # the class, where a method named AsyncResult shadows it
from .schedules import declare_beat_schedule
from .task import Task as _Task  # the class, where an attribute named Task shadows it
from .task import _tasks
from .values import RESULT_EXPIRES_SECONDS

#: The ``app.conf`` settings that change what runs (the others are kept, unused).
_SCHEDULE_SETTINGS = frozenset({"beat_schedule", "timezone"})

#: What ``app.conf`` answers for Celery settings never set (Celery's defaults). Of these only
#: ``task_always_eager`` changes anything: tasks then run in the caller's thread (``apply``).
DEFAULTS: dict[str, Any] = {
    "broker_url": None,
    "result_backend": None,
    "broker_pool_acquire_timeout": None,
    "broker_connection_retry_on_startup": None,
    "result_backend_transport_options": {},
    "broker_transport_options": {},
    "result_extended": False,
    "result_expires": RESULT_EXPIRES_SECONDS,
    "task_always_eager": False,
    "task_eager_propagates": False,
    "task_store_eager_result": False,
    "task_allow_error_cb_on_chord_header": False,
    "task_protocol": 2,
    "task_serializer": "json",
    "result_serializer": "json",
    "accept_content": ["json"],
    "task_default_queue": "default",
    "task_create_missing_queues": True,
    "task_send_sent_event": False,
    "task_publish_retry": True,
    "task_publish_retry_policy": {},
    "task_track_started": False,
    "task_ignore_result": False,
    "worker_prefetch_multiplier": 1,
    "timezone": None,
    "enable_utc": True,
    "beat_schedule": {},
}

current_app = current.current_app


class Settings(dict[str, Any]):
    """``app.conf``: Celery's settings by key or attribute; ``beat_schedule`` feeds the periodic scheduler."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            if name in DEFAULTS:
                return copy.copy(DEFAULTS[name])
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


#: Parts of a Celery app that are kombu's broker connections and AMQP machinery.
_BROKER_PARTS = frozenset(
    {
        "amqp",
        "connection",
        "connection_for_read",
        "connection_for_write",
        "producer_pool",
        "pool",
        "broker_connection",
        "events",
        "producer_or_acquire",
    }
)


class BrokerPartNotProvided(NotProvided):
    """A Celery app's broker connection or AMQP part: there is none (pushes go through the engine's Redis pool)."""


def __getattr__(name: str) -> Any:
    """``celery.app.trace`` (Celery's internal tracer and its log formats) is not provided."""
    if name == "trace":
        raise NotImplementedError(
            "celery.app.trace is Celery's internal tracer: runworkers runs tasks itself (see jobsapp.celery.trace); "
            "worker log lines are the engine's (docs/logging.md)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Celery:
    """A stand-in for ``celery.Celery`` in a project that moved to jobsapp."""

    def __getattr__(self, name: str) -> Any:
        if name in _BROKER_PARTS:
            raise BrokerPartNotProvided(
                f"app.{name} is part of Celery's broker connection (kombu's connection pool, AMQP): jobsapp pushes through "
                "its own Redis pool; call apply_async / send_task instead"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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
        current.set_current_app(self)  # each new app is the current one, as Celery's
        self.conf = Settings()
        self.control = Control()
        #: The result store, read as Celery's ``app.backend``.
        self.backend = ResultBackend()
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

    def register_task(self, task: Any, autoregister: bool = True, **options: Any) -> Any:
        """Register a class-based task (an instance, or the class, of a ``Task`` subclass defining
        ``run``), as Celery's: named by its ``name`` attribute, else ``module.ClassName``. Every
        process that runs it must register it too (a worker imports the module that does)."""
        instance = task() if isinstance(task, type) else task
        if not isinstance(instance, _Task):
            raise TypeError(f"register_task() takes a jobsapp.celery.Task subclass or instance, not {task!r}")
        kind = type(instance)
        run = kind.__dict__.get("run") or getattr(kind, "run", None)
        if run is None or run is _Task.run:
            raise TypeError(f"{kind.__qualname__} defines no run() method: a class-based task's body is its run()")
        if not instance.name:
            kind.name = self.gen_task_name(kind.__name__, kind.__module__)
        kind.function = staticmethod(run)  # its signature checks calls (bound: the task is its first argument)
        kind.bind = True
        instance._register(explicit_name=True)
        return instance

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
        ignore_result: bool | None = None,
        **options: Any,
    ) -> _AsyncResult[Any]:
        """Push task ``name`` for the workers that define it; this process needs not. Without
        ``ignore_result`` the task's own ``ignore_result`` decides when this process defines it,
        else ``task_ignore_result`` (Celery's worker applies its task's: a producer that does not
        define an ignoring task gets its result stored)."""
        if ignore_result is None:
            defined = _tasks.get(name)
            ignore_result = bool(defined.ignore_result if defined is not None else self.conf.get("task_ignore_result"))
        honoured = {key: options.pop(key) for key in list(options) if key in HONOURED_OPTIONS and key not in ("link", "link_error")}
        check_options(options, where="send_task()")
        jid = push_by_name(
            name,
            list(args or ()),
            dict(kwargs or {}),
            task_id=task_id or honoured.pop("task_id", None),
            countdown=countdown,
            eta=eta,
            expires=expires,
            queue=queue,
            ignore_result=ignore_result,
            headers=honoured.pop("headers", None),
            request=request_fields(task_id, honoured),
        )
        return AsyncResult(jid, task_name=name)


current.default_app = lambda: Celery("default")
