"""How one run of a Celery-style task is traced: its soft time limit, its handlers, its einfo.

Runs in the thread that runs the task: a processor thread (``Task._execute``) or the caller's
thread (``Task.apply``, eager). Touches no Redis key itself.

- ``soft_limit``: ``soft_time_limit`` raises ``SoftTimeLimitExceeded`` inside the task. One
  watchdog thread per process (``jobsapp.worker.timeouts.Watchdog``, thread ``jobsapp.timeouts``,
  started by the first task that has a soft limit) raises it in the task's thread past the
  limit, as the engine's ``timeout`` raises ``JobTimeout``; the task may catch it and clean up.
  Uncaught, the task fails like any exception (dead set, FAILURE, or a retry by
  ``autoretry_for``). ``time_limit`` is the engine's ``timeout``, mapped to ``TimeLimitExceeded``.
- ``running``: the tasks running in this thread, innermost last (``task.request`` is per task;
  this stack serves task loggers, and ``AsyncResult.get`` refusing to block a worker's thread).
- ``call_handler``: the handlers of a ``base=`` class (``before_start``, ``on_success``,
  ``on_failure``, ``on_retry``, ``after_return``) are called as Celery 5's tracer calls them; a
  handler that raises is logged and changes nothing about the job's fate (``before_start`` is the
  exception: it runs inside the task's try, as Celery's, so its error fails the task).
"""

from __future__ import annotations

import logging
import threading
import traceback as traceback_module
from collections.abc import Callable
from typing import Any

from ..worker import timeouts
from .exceptions import SoftTimeLimitExceeded

logger = logging.getLogger("jobsapp.celery")


_running = threading.local()


def running() -> list[tuple[Any, Any]]:
    """(task, request) of the tasks running in this thread, innermost last (the list itself)."""
    stack: list[tuple[Any, Any]] = _running.__dict__.setdefault("stack", [])
    return stack


def inside_worker_task() -> bool:
    """Whether this thread is running a task for a worker (not an eager ``apply``)."""
    stack = running()
    return bool(stack) and not stack[-1][1].is_eager


class ExceptionInfo:
    """What a failure handler gets as ``einfo`` (billiard's ``ExceptionInfo``): the exception,
    its type, its traceback object and the formatted traceback text."""

    def __init__(self, exception: BaseException) -> None:
        self.exception = exception
        self.type = type(exception)
        self.tb = exception.__traceback__
        self.traceback = "".join(traceback_module.format_exception(exception))

    def __str__(self) -> str:
        return self.traceback

    def __repr__(self) -> str:
        return f"<ExceptionInfo: {self.exception!r}>"


def _raise_soft_limit(thread_id: int, exception: type[BaseException] | None) -> None:
    """The soft-limit watchdog's interrupt: ``SoftTimeLimitExceeded`` instead of ``JobTimeout``."""
    timeouts.raise_in_thread(thread_id, SoftTimeLimitExceeded if exception is not None else None)


_soft_limits = timeouts.Watchdog(interrupt=_raise_soft_limit)


def soft_limit(seconds: float | None, call: Callable[[], Any], *, name: str, task_id: str | None) -> Any:
    """``call()`` with ``SoftTimeLimitExceeded`` raised in it past ``seconds`` (None: no limit)."""
    if seconds is None:
        return call()
    return _soft_limits.within(seconds, call, class_name=name, jid=task_id)()


def call_handler(handler: Callable[..., Any], *arguments: Any) -> None:
    """Call a task handler; its own exception is logged, never raised: the job's fate is decided."""
    try:
        handler(*arguments)
    except Exception:  # the handler's bug: logged; the task's outcome (already decided) stands
        logger.exception("the task handler %s raised; the task's outcome is unchanged", getattr(handler, "__qualname__", handler))
