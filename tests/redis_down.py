"""A Redis client on a port where nothing listens: every call fails at once with ConnectionError,
as a real outage does (no fake client: the engine's own error handling meets a real failure)."""

from __future__ import annotations

import socket

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


def unreachable_redis() -> redis.Redis:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # the port is free again, and nothing listens on it
    # no retries inside redis-py: each call fails once, at once (the engine's own backoff is tested)
    return redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
