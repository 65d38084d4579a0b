"""Test fixtures: one throwaway redis-server for the whole run, emptied before every test.

The engine is pointed at it through settings.JOBSAPP and $REDIS_URL (for worker subprocesses).
PostgreSQL is used when $DATABASE_URL points at one; SQLite otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis as redis_lib

from tests.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _engine_on_test_redis(redis_server: RedisServer, settings) -> Iterator[None]:
    from jobsapp import connection, middleware, testing

    settings.JOBSAPP = {**getattr(settings, "JOBSAPP", {}), "REDIS_URL": redis_server.url}
    settings.REDIS_URL = redis_server.url
    connection.reset()
    middleware.reset_chains()
    redis_server.client().flushall()
    yield
    testing.set_mode("disabled")
    testing.clear_all()
    connection.reset()
    middleware.reset_chains()


@pytest.fixture
def redis(redis_server: RedisServer) -> redis_lib.Redis:
    """A raw client on the test server (bytes responses), for asserting on keys."""
    return redis_server.client()
