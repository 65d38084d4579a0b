"""Declaring Celery-style tasks: ``shared_task`` / ``task`` and ``app.task`` (one decorator).

A task is declared when its module is imported (an app's ``tasks.py``, autodiscovered): ``define``
makes a subclass of ``Task`` (of ``base=`` when given) whose class attributes are the options,
makes its one instance and registers its job class, as Celery makes task classes. Options Celery
has and this layer cannot honour warn once or are refused (options.py); a bad value (a negative
time limit, ``base=`` that is not a Task class) fails here, at declaration, never in a worker.

The overloads mirror celery-types', so code type-checked against Celery's stubs type-checks
against these (tests/conformance/celery_tasks/test_typing.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, overload

from ..functions import dotted_path
from .options import check_options
from .task import Task

Params = ParamSpec("Params")
Returned = TypeVar("Returned")
TaskType = TypeVar("TaskType", bound=Task[Any, Any])

#: Options a decorator sets on the task's class (the rest are Celery's ignored options).
_TASK_OPTIONS = frozenset(
    {
        "name",
        "bind",
        "queue",
        "max_retries",
        "default_retry_delay",
        "autoretry_for",
        "dont_autoretry_for",
        "retry_kwargs",
        "retry_backoff",
        "retry_backoff_max",
        "retry_jitter",
        "ignore_result",
        "expires",
        "soft_time_limit",
        "time_limit",
        "priority",
        "track_started",
        "use_task_event",
        "typing",
    }
)
#: Handlers Celery lets a decorator set (``@app.task(on_retry=...)``): they become methods.
_HANDLER_OPTIONS = frozenset({"before_start", "on_success", "on_failure", "on_retry", "after_return"})


#: Celery's pydantic options (``pydantic=True`` and how models are validated and dumped).
_PYDANTIC_OPTIONS = ("pydantic", "pydantic_strict", "pydantic_context", "pydantic_dump_kwargs")


def pydantic_wrapper(
    function: Callable[..., Any], *, strict: bool = False, context: dict[str, Any] | None = None, dump_kwargs: dict[str, Any] | None = None
) -> Callable[..., Any]:
    """``pydantic=True`` as Celery does it: an argument annotated with a pydantic model arrives as
    JSON (a dict) and is validated into the model before the function runs; a model returned is
    dumped to a dict (``model_dump(**dump_kwargs)``, JSON mode unless told otherwise)."""
    import functools
    import inspect
    import typing

    from pydantic import BaseModel

    signature = inspect.signature(function)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        hints = typing.get_type_hints(function)  # at call time: string annotations resolve once the module is loaded
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            annotation = hints.get(name)
            if isinstance(annotation, type) and issubclass(annotation, BaseModel) and not isinstance(value, annotation):
                bound.arguments[name] = annotation.model_validate(value, strict=strict, context=context)
        returned = function(*bound.args, **bound.kwargs)
        if isinstance(returned, BaseModel):
            return returned.model_dump(**({"mode": "json"} if dump_kwargs is None else dump_kwargs))
        return returned

    return wrapper


def _default_name(function: Callable[..., Any]) -> str:
    """``module.function``; a function declared inside another one is named the same way, as Celery names it."""
    if "<locals>" in getattr(function, "__qualname__", ""):
        return f"{function.__module__}.{function.__name__}"
    return dotted_path(function)


def define(
    function: Callable[..., Any],
    *,
    base: type[Task[Any, Any]] | None = None,
    namer: Callable[[str, str], str] | None = None,
    **options: Any,
) -> Task[Any, Any]:
    """The task of ``function``: an instance of a new subclass of ``base`` (``Task`` by default)
    whose class attributes are ``options``, registered under its name (``name=``, else
    ``namer(function name, module)``, else ``module.function``)."""
    if not callable(function) or isinstance(function, Task):
        raise TypeError(f"a task decorator takes a function, not {function!r}")
    base = Task if base is None else base
    if not (isinstance(base, type) and issubclass(base, Task)):
        raise TypeError(f"base= must be a subclass of jobsapp.celery.Task (class MyTask(Task): ...), not {base!r}")
    pydantic = {name: options.pop(name) for name in _PYDANTIC_OPTIONS if name in options}
    if pydantic.get("pydantic"):
        runs = pydantic_wrapper(
            function,
            strict=bool(pydantic.get("pydantic_strict")),
            context=pydantic.get("pydantic_context"),
            dump_kwargs=pydantic.get("pydantic_dump_kwargs"),
        )
    else:
        runs = function
    unknown = sorted(set(options) - _TASK_OPTIONS - _HANDLER_OPTIONS)
    check_options({name: options[name] for name in unknown}, where="the task decorator")
    namespace: dict[str, Any] = {
        "__module__": function.__module__,
        "__qualname__": getattr(function, "__qualname__", function.__name__),
        "__doc__": function.__doc__,
        "function": staticmethod(runs),
        "name": options.get("name") or (namer(function.__name__, function.__module__) if namer else _default_name(function)),
    }
    for option in _TASK_OPTIONS & set(options):
        value = options[option]
        namespace[option] = tuple(value) if option in ("autoretry_for", "dont_autoretry_for") else value
    for handler in _HANDLER_OPTIONS & set(options):
        namespace[handler] = options[handler]  # a plain function: bound like a method, as Celery does
    task_class: type[Task[Any, Any]] = type(function.__name__, (base,), namespace)
    task = task_class()
    task._register(explicit_name=bool(options.get("name")) or namer is not None)
    return task


class TaskDecorator:
    """``shared_task`` and ``app.task``: ``@shared_task``, ``@shared_task()``,
    ``@shared_task(bind=True, base=MyTask, queue=..., max_retries=..., ...)``.

    Put tasks in an app's ``tasks.py`` (autodiscovered). Celery options this layer cannot
    honour (``rate_limit``, ``acks_late``, ...) are accepted with a one-time warning; an option
    Celery does not have either is a TypeError. ``app.task`` names tasks with the app's
    ``gen_task_name``."""

    def __init__(
        self, namer: Callable[[str, str], str] | None = None, default_base: Callable[[], type[Task[Any, Any]]] | None = None
    ) -> None:
        self.namer = namer
        self.default_base = default_base  # the app's task_cls, for tasks declared without base=

    def _options(self, options: dict[str, Any]) -> dict[str, Any]:
        if self.default_base is not None and options.get("base") is None:
            return {**options, "base": self.default_base()}
        return options

    @overload
    def __call__(self, fun: Callable[Params, Returned], /) -> Task[Params, Returned]: ...
    @overload
    def __call__(
        self,
        *,
        name: str = ...,
        bind: Literal[False] = ...,
        base: None = ...,
        queue: str = ...,
        max_retries: int | None = ...,
        default_retry_delay: float = ...,
        autoretry_for: Sequence[type[BaseException]] = ...,
        dont_autoretry_for: Sequence[type[BaseException]] = ...,
        retry_kwargs: dict[str, Any] = ...,
        retry_backoff: bool | int = ...,
        retry_backoff_max: int = ...,
        retry_jitter: bool = ...,
        ignore_result: bool = ...,
        expires: float | dt.datetime | None = ...,
        soft_time_limit: float = ...,
        time_limit: float = ...,
        use_task_event: bool = ...,
        **options: Any,
    ) -> Callable[[Callable[Params, Returned]], Task[Params, Returned]]: ...
    @overload
    def __call__(
        self,
        *,
        name: str = ...,
        bind: Literal[True],
        base: None = ...,
        queue: str = ...,
        max_retries: int | None = ...,
        default_retry_delay: float = ...,
        autoretry_for: Sequence[type[BaseException]] = ...,
        dont_autoretry_for: Sequence[type[BaseException]] = ...,
        retry_kwargs: dict[str, Any] = ...,
        retry_backoff: bool | int = ...,
        retry_backoff_max: int = ...,
        retry_jitter: bool = ...,
        ignore_result: bool = ...,
        expires: float | dt.datetime | None = ...,
        soft_time_limit: float = ...,
        time_limit: float = ...,
        use_task_event: bool = ...,
        **options: Any,
    ) -> Callable[[Callable[Concatenate[Task[Params, Returned], Params], Returned]], Task[Params, Returned]]: ...
    @overload
    def __call__(
        self,
        *,
        name: str = ...,
        bind: Literal[True],
        base: type[TaskType],
        queue: str = ...,
        max_retries: int | None = ...,
        default_retry_delay: float = ...,
        autoretry_for: Sequence[type[BaseException]] = ...,
        dont_autoretry_for: Sequence[type[BaseException]] = ...,
        retry_kwargs: dict[str, Any] = ...,
        retry_backoff: bool | int = ...,
        retry_backoff_max: int = ...,
        retry_jitter: bool = ...,
        ignore_result: bool = ...,
        expires: float | dt.datetime | None = ...,
        soft_time_limit: float = ...,
        time_limit: float = ...,
        use_task_event: bool = ...,
        **options: Any,
    ) -> Callable[[Callable[Concatenate[TaskType, Params], Returned] | Callable[[], Returned]], TaskType]: ...
    @overload
    def __call__(
        self,
        *,
        name: str = ...,
        bind: bool = ...,
        base: type[TaskType],
        queue: str = ...,
        max_retries: int | None = ...,
        default_retry_delay: float = ...,
        autoretry_for: Sequence[type[BaseException]] = ...,
        dont_autoretry_for: Sequence[type[BaseException]] = ...,
        retry_kwargs: dict[str, Any] = ...,
        retry_backoff: bool | int = ...,
        retry_backoff_max: int = ...,
        retry_jitter: bool = ...,
        ignore_result: bool = ...,
        expires: float | dt.datetime | None = ...,
        soft_time_limit: float = ...,
        time_limit: float = ...,
        use_task_event: bool = ...,
        **options: Any,
    ) -> Callable[[Callable[..., Any]], TaskType]: ...
    def __call__(self, fun: Callable[..., Any] | None = None, **options: Any) -> Any:
        if fun is not None:
            return define(fun, namer=self.namer, **self._options(options))

        def decorate(function: Callable[..., Any]) -> Task[Any, Any]:
            return define(function, namer=self.namer, **self._options(options))

        return decorate

    def __repr__(self) -> str:
        return "<jobsapp.celery.shared_task>"


shared_task = TaskDecorator()
task = shared_task
