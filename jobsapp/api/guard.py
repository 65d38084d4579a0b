"""Connection-error translation for every public entry point of ``jobsapp.api``.

The dashboard, the CLI and the metrics endpoint call the API from request threads. When Redis
does not answer they must say so (503, a clear message), never crash with a redis-py traceback:
``translate_errors`` turns the connection errors of ``jobsapp.connection.CONNECTION_ERRORS`` into
``jobsapp.RedisUnavailable``. No job is touched on that path: the API either finished its Lua
script (atomic) or never reached Redis.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from ..connection import CONNECTION_ERRORS, unavailable

Params = ParamSpec("Params")
Result = TypeVar("Result")


def translate_errors(function: Callable[Params, Result]) -> Callable[Params, Result]:
    """Wrap ``function`` so a lost connection raises RedisUnavailable."""

    @functools.wraps(function)
    def wrapper(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        try:
            return function(*args, **kwargs)
        except CONNECTION_ERRORS as exc:  # nothing was half-done: Lua scripts are atomic
            raise unavailable(exc) from exc

    return wrapper
