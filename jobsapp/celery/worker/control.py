"""``celery.worker.control``: remote control commands a Celery worker runs when a broadcast reaches
it over the broker. ``runworkers`` has no broadcast channel: declaring a command
(``@control_command``, ``@inspect_command``) is accepted and keeps the function as it is, so a
module that declares some still imports; calling the queue commands (``add_consumer``,
``cancel_consumer``) raises ``NotImplementedError``: queues are ``runworkers -q`` options.
``app.control.inspect()`` answers the standard questions from the process registry instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

#: The commands declared in this process, by name (never run by a worker: there is no broadcast).
declared: dict[str, Callable[..., Any]] = {}


def _declare(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        declared[options.get("name") or function.__name__] = function
        return function

    return decorate


def control_command(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declares a remote control command (kept; no broadcast ever runs it)."""
    return _declare(**options)


def inspect_command(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declares a remote inspect command (kept; no broadcast ever runs it)."""
    return _declare(**options)


def add_consumer(state: Any, queue: str, *args: Any, **kwargs: Any) -> NoReturn:
    raise NotImplementedError("add_consumer: runworkers takes its queues from -q at start; there is no broadcast to change them")


def cancel_consumer(state: Any, queue: str, *args: Any, **kwargs: Any) -> NoReturn:
    raise NotImplementedError("cancel_consumer: runworkers takes its queues from -q at start; there is no broadcast to change them")
