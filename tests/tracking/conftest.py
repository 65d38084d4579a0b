"""Fixtures of the tracking tests: the tracking middleware in both engine chains, a file-backed
test database that worker subprocesses can share, and helpers to run a pushed job in-process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

CLIENT = "tracking.middleware.TrackingClientMiddleware"
SERVER = "tracking.middleware.TrackingServerMiddleware"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None, tmp_path_factory) -> None:
    """SQLite tests use a database file (not memory), so a worker subprocess can open it too."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        database.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("tracking-db") / "test.sqlite3")


@pytest.fixture(autouse=True)
def _tracking_middleware(_engine_on_test_redis: None, settings) -> Iterator[None]:
    from jobsapp import middleware

    settings.JOBSAPP = {**settings.JOBSAPP, "CLIENT_MIDDLEWARE": [CLIENT], "SERVER_MIDDLEWARE": [SERVER]}
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast test users
    # API throttle counters in process memory, fresh per test (the project's cache is a Redis
    # that the test run did not start).
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    from django.core.cache import cache

    cache.clear()
    middleware.reset_chains()
    yield
    middleware.reset_chains()
    # Flush and end this process's recording thread (tracking.writer): its database connection
    # must not outlive the test (PostgreSQL cannot drop a test database someone is connected to).
    from tracking.writer import stop_writer

    stop_writer()


def pop_item(redis, queue: str = "default") -> dict[str, Any]:
    """Take the oldest job of ``queue`` as a worker would."""
    raw = redis.rpop(f"queue:{queue}")
    assert raw is not None, f"queue {queue} is empty"
    return json.loads(raw)


def run_item(item: dict[str, Any]) -> Any:
    """Run one job through the server chain, as a processor thread does (exceptions propagate)."""
    from jobsapp import registry
    from jobsapp.middleware import run_server_chain

    job = registry.lookup(item["class"])()
    job.jid = item["jid"]
    job.item = item
    job.queue = item["queue"]
    return run_server_chain(job, item, item["queue"], lambda: job.perform(*item["args"], **item.get("kwargs", {})))


@pytest.fixture
def run_job() -> Callable[[dict[str, Any]], Any]:
    return run_item


@pytest.fixture
def pop(redis) -> Callable[..., dict[str, Any]]:
    return lambda queue="default": pop_item(redis, queue)
