"""The Redis connection the engine uses, from a URL or from a django-redis cache alias.

One client (and so one connection pool) per process: redis-py clients are thread-safe and
check connections out of the pool per command. The client is built lazily and dropped when the
process forks, so a child of ``runworkers -P`` never shares a socket with its parent.

Responses are bytes, never decoded: a job's raw JSON must go back to Redis exactly as it came
(``LREM`` compares bytes), and a malformed, non-UTF-8 payload must still be readable so it can be
moved to the dead set instead of wedging the fetcher.
"""

from __future__ import annotations

import os
import threading

import redis

from .conf import jobs_settings
from .errors import RedisUnavailable

_lock = threading.Lock()
_client: redis.Redis | None = None
_client_config: tuple[object, ...] | None = None

#: Exceptions that mean "Redis is not answering right now" rather than "this command is wrong".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.ClusterDownError,
    ConnectionError,
    OSError,
)


#: Any failure of a Redis call: no answer, or an error reply a worker must survive and retry
#: (READONLY after a failover, MISCONF on a full disk, OOM, BUSY, LOADING).
REDIS_ERRORS: tuple[type[BaseException], ...] = (*CONNECTION_ERRORS, redis.RedisError)


def _config() -> tuple[object, ...]:
    return (jobs_settings.REDIS_CACHE_ALIAS, jobs_settings.REDIS_URL, jobs_settings.REDIS_SOCKET_TIMEOUT_SECONDS)


def _build(pool_size: int | None = None) -> redis.Redis:
    alias = jobs_settings.REDIS_CACHE_ALIAS
    if alias:
        from django_redis import get_redis_connection

        return get_redis_connection(alias)
    timeout = jobs_settings.REDIS_SOCKET_TIMEOUT_SECONDS
    return redis.Redis.from_url(
        jobs_settings.REDIS_URL,
        socket_timeout=timeout,
        socket_connect_timeout=min(timeout, 5.0),
        health_check_interval=30,
        max_connections=pool_size,
        decode_responses=False,
    )


def get_redis() -> redis.Redis:
    """The process-wide client; rebuilt when the settings that shape it change (tests)."""
    global _client, _client_config
    config = _config()
    client = _client
    if client is not None and _client_config == config:
        return client
    with _lock:
        if _client is None or _client_config != config:
            _client = _build()
            _client_config = config
        return _client


def new_redis(*, blocking_timeout_seconds: float = 0.0) -> redis.Redis:
    """A client with its own pool, for a thread that blocks (BLMOVE/BRPOP) on its connection.

    Its socket timeout exceeds the longest block so a quiet queue is not mistaken for a dead
    server.
    """
    alias = jobs_settings.REDIS_CACHE_ALIAS
    if alias:
        from django_redis import get_redis_connection

        base = get_redis_connection(alias)
        kwargs = dict(base.connection_pool.connection_kwargs)
        kwargs["socket_timeout"] = max(kwargs.get("socket_timeout") or 0, blocking_timeout_seconds + 5)
        pool = base.connection_pool.__class__(connection_class=base.connection_pool.connection_class, **kwargs)
        return redis.Redis(connection_pool=pool)
    timeout = max(jobs_settings.REDIS_SOCKET_TIMEOUT_SECONDS, blocking_timeout_seconds + 5)
    return redis.Redis.from_url(
        jobs_settings.REDIS_URL,
        socket_timeout=timeout,
        socket_connect_timeout=5.0,
        health_check_interval=30,
        decode_responses=False,
    )


def as_bytes(value: object) -> bytes:
    """A reply as bytes (the engine's clients never decode; typing says ``bytes | str``)."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def as_text(value: object) -> str:
    """A reply as text, invalid UTF-8 replaced (identities, queue names)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def reset() -> None:
    """Forget the client (after fork, or when a test points the engine at another server)."""
    global _client, _client_config
    _client = None
    _client_config = None


def describe() -> str:
    """Where the engine connects, without a password, for banners and error messages."""
    alias = jobs_settings.REDIS_CACHE_ALIAS
    if alias:
        return f"cache alias {alias!r}"
    url = str(jobs_settings.REDIS_URL)
    if "@" in url:
        scheme, _, rest = url.partition("://")
        url = f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def unavailable(exc: BaseException) -> RedisUnavailable:
    """The documented error raised to callers when Redis does not answer."""
    return RedisUnavailable(f"Redis is unavailable at {describe()}: {exc}")


os.register_at_fork(after_in_child=reset)
