"""Function jobs: ``@jobsapp.job(...)`` turns a plain function into a registered job.

    @jobsapp.job(queue="mail", retry=5, retain=3600)
    def send_welcome(user_id: int) -> str: ...

    send_welcome.perform_async(42)             # enqueue; returns the jid
    send_welcome.perform_in(30, 42)            # or perform_at(datetime, 42), set(queue=...)
    send_welcome(42)                           # still a plain call, in this thread

An ``async def`` function makes an async job (``Job.is_async``): workers await it on their event
loop (``jobsapp.worker.aio``); a plain call still returns the coroutine. An async generator is refused.

Decorating defines a ``Job`` subclass whose ``perform`` calls the function, registered at once
under the function's dotted path (``module.qualname``, the wire name), so only functions defined
in imported code (an app's ``jobs.py`` or ``tasks.py``, autodiscovered) can ever run; a payload
naming any other function is an unknown job class. A nested function (``<locals>`` in its
qualified name) is refused: no worker could import the code that defines it.

The Django tasks backend and the Celery-compatible API build their tasks on ``job_class_for``.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar, overload

from .job import Job, Setter, sidekiq_options

Params = ParamSpec("Params")
Returned = TypeVar("Returned")


class FunctionJob(Job):
    """A job whose ``perform`` calls a plain function with the payload's args and kwargs."""

    abstract = True
    function: ClassVar[Callable[..., Any]]

    def perform(self, *args: Any, **kwargs: Any) -> Any:
        return type(self).function(*args, **kwargs)


def dotted_path(function: Callable[..., Any]) -> str:
    """``module.qualname`` of a module-level function; ValueError for a nested or anonymous one."""
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise ValueError(
            f"{function!r} is not a module-level function: a job must be importable by name "
            "(define it at the top level of a jobs.py or tasks.py module)"
        )
    return f"{module}.{qualname}"


def job_class_for(
    function: Callable[..., Any],
    *,
    base: type[FunctionJob] = FunctionJob,
    name: str | None = None,
    attributes: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> type[FunctionJob]:
    """Define and register the job class that runs ``function`` under ``name`` (default: its dotted path)."""
    if inspect.isasyncgenfunction(function):
        raise TypeError(f"{function!r} is an async generator (async def with yield): a worker could not run it to the end")
    path = dotted_path(function)
    wire_name = name or path
    namespace: dict[str, Any] = {
        "__module__": function.__module__,
        "__qualname__": function.__qualname__,
        "__doc__": function.__doc__,
        "abstract": True,  # registered below, once its options (and wire name) are set
        "function": staticmethod(function),
        # perform returns the coroutine; the worker awaits it on its loop (jobsapp.worker.aio.perform)
        "is_async": inspect.iscoroutinefunction(function),
        **(attributes or {}),
    }
    job_class: type[FunctionJob] = type(function.__name__, (base,), namespace)
    job_class.abstract = False
    merged = {**(options or {})}
    if wire_name != path:
        merged["class_name"] = wire_name
    return sidekiq_options(**merged)(job_class)


class JobFunction(Generic[Params, Returned]):
    """What ``@jobsapp.job`` returns: the function (still callable) plus the enqueueing methods."""

    def __init__(self, function: Callable[Params, Returned], job_class: type[FunctionJob]) -> None:
        functools.update_wrapper(self, function)
        self.function = function
        self.job_class = job_class

    def __call__(self, *args: Params.args, **kwargs: Params.kwargs) -> Returned:
        """Run the function here and now, as a plain call."""
        return self.function(*args, **kwargs)

    @property
    def name(self) -> str:
        """The wire name in payloads."""
        return self.job_class.wire_name()

    def perform_async(self, *args: Params.args, **kwargs: Params.kwargs) -> str | None:
        """Enqueue now; the jid, or None when a client middleware stopped the push."""
        return self.job_class.perform_async(*args, **kwargs)

    def perform_in(self, interval: float | dt.timedelta, *args: Params.args, **kwargs: Params.kwargs) -> str | None:
        """Enqueue after ``interval`` seconds (or a timedelta); values >= 1e9 are epoch times."""
        return self.job_class.perform_in(interval, *args, **kwargs)

    def perform_at(self, when: float | dt.datetime, *args: Params.args, **kwargs: Params.kwargs) -> str | None:
        """Enqueue at ``when`` (an aware or UTC-naive datetime, or epoch seconds)."""
        return self.job_class.perform_at(when, *args, **kwargs)

    def perform_bulk(self, args_list: Iterable[list[Any]], *, batch_size: int = 1000) -> list[str | None]:
        """One job per argument list, ``batch_size`` per Redis round trip."""
        return self.job_class.perform_bulk(args_list, batch_size=batch_size)

    def set(self, **options: Any) -> Setter:
        """One-off options: ``send_welcome.set(queue="critical", wait=60).perform_async(42)``."""
        return self.job_class.set(**options)

    def __repr__(self) -> str:
        return f"<job function {self.name}>"


@overload
def job(function: Callable[Params, Returned], /) -> JobFunction[Params, Returned]: ...


@overload
def job(
    *, name: str | None = None, queue: str | None = None, retry: bool | int | None = None, **options: Any
) -> Callable[[Callable[Params, Returned]], JobFunction[Params, Returned]]: ...


def job(
    function: Callable[Params, Returned] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    retry: bool | int | None = None,
    **options: Any,
) -> JobFunction[Params, Returned] | Callable[[Callable[Params, Returned]], JobFunction[Params, Returned]]:
    """Decorator: make a module-level function a job. ``@job`` or ``@job(queue=..., retry=..., ...)``.

    Options are ``sidekiq_options``' (``retain``, ``backtrace``, ``tags``, ...); ``name`` sets the
    wire name (default: the dotted path), e.g. a Ruby-style ``"HardWorker"``.
    """
    if queue is not None:
        options["queue"] = queue
    if retry is not None:
        options["retry"] = retry

    def decorate(target: Callable[Params, Returned]) -> JobFunction[Params, Returned]:
        return JobFunction(target, job_class_for(target, name=name, options=options))

    return decorate(function) if function is not None else decorate
