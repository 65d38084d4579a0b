"""Connection-error translation for every public entry point of ``jobsapp.api``.

The dashboard, the CLI and the metrics endpoint call the API from request threads. When Redis
does not answer they must say so (503, a clear message), never crash with a redis-py traceback:
``translate_errors`` turns the connection errors of ``jobsapp.connection.CONNECTION_ERRORS``, and
Redis refusing writes (OOM, READONLY, MISCONF), into ``jobsapp.RedisUnavailable``. No job is
touched on that path: the API either finished its Lua script (atomic) or never reached Redis.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import redis

from ..connection import CONNECTION_ERRORS, refuses_writes, unavailable

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
        except redis.ResponseError as exc:  # OOM, READONLY, MISCONF: unavailable for now (503), else a real error
            if refuses_writes(exc):
                raise unavailable(exc) from exc
            raise

    return wrapper
