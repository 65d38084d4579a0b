"""Test fixtures: one throwaway redis-server for the whole run, emptied before every test.

With ``JOBSAPP_TEST_REDIS_CLUSTER=1`` in the environment the run gets a throwaway three-master
Redis Cluster instead (tests/redis_cluster.py), and the engine runs in cluster mode
(``JOBSAPP["REDIS_CLUSTER"]``, and ``$REDIS_CLUSTER`` for the processes tests start): ``.ci/run``
runs a slice of the suite that way. Tests that spell
key names as Sidekiq's layout does, or need a single server, are marked ``standalone_only`` and
skipped there.

The engine is pointed at it through settings.JOBSAPP and $REDIS_URL (for worker subprocesses).
PostgreSQL is used when $DATABASE_URL points at one; SQLite otherwise.

Every test that can reach the database is marked ``database`` at collection (below), which is
how .ci/run picks the tests it runs a second time on PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
import redis as redis_lib

from tests import workers
from tests.redis_cluster import RedisClusterServers
from tests.redis_server import RedisServer

#: Set (to anything) to run the suite against a Redis Cluster in cluster mode.
ON_CLUSTER = bool(os.environ.get("JOBSAPP_TEST_REDIS_CLUSTER"))

#: Whole directories whose subject is database-backed: tracking (models, migrations, the
#: PostgreSQL single-trip path) and the django.tasks backend's conformance suite.
DATABASE_DIRECTORIES = ("tests/tracking/", "tests/conformance/django_tasks/")
#: pytest-django's fixtures behind every way a test gets the database: db, transactional_db,
#: live_server, admin_client, django_user_model, ... (and any fixture built on them).
DATABASE_FIXTURES = frozenset({"_django_db_helper", "django_db_setup"})


def uses_database(item: pytest.Item) -> bool:
    """Whether a test can reach the database. pytest-django refuses the database to any test
    without one of these, so a test that uses the ORM in this process is always caught; a test
    whose worker processes use it gets them the database through ``worker_database_url`` (which
    asks for the mark) or is marked ``database`` by hand."""
    if item.get_closest_marker("database") or item.get_closest_marker("django_db"):
        return True
    if DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    test_class = getattr(item, "cls", None)
    if test_class is not None:
        from django.test import SimpleTestCase

        # Django's TestCase and TransactionTestCase have databases = {"default"}; a SimpleTestCase
        # has none unless it names some
        if issubclass(test_class, SimpleTestCase) and test_class.databases:
            return True
    path = item.path.relative_to(item.config.rootpath).as_posix()
    return path.startswith(DATABASE_DIRECTORIES)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if uses_database(item):
            item.add_marker(pytest.mark.database)
        if ON_CLUSTER and item.get_closest_marker("standalone_only"):
            item.add_marker(pytest.mark.skip(reason="needs a standalone Redis (Sidekiq's key names or one server)"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    workers.running_test_uses_database = item.get_closest_marker("database") is not None


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer | RedisClusterServers]:
    server: RedisServer | RedisClusterServers = RedisClusterServers().start() if ON_CLUSTER else RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    if ON_CLUSTER:  # the processes tests start: project/settings.py turns cluster mode on from it
        os.environ["REDIS_CLUSTER"] = "1"
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _engine_on_test_redis(redis_server: RedisServer | RedisClusterServers, settings) -> Iterator[None]:
    from jobsapp import connection, middleware, testing

    cluster = {"REDIS_CLUSTER": True} if ON_CLUSTER else {}
    settings.JOBSAPP = {**getattr(settings, "JOBSAPP", {}), "REDIS_URL": redis_server.url, **cluster}
    settings.REDIS_URL = redis_server.url
    connection.reset()
    middleware.reset_chains()
    if isinstance(redis_server, RedisClusterServers):
        redis_server.flushall()
    else:
        redis_server.client().flushall()
    yield
    testing.set_mode("disabled")
    testing.clear_all()
    connection.reset()
    middleware.reset_chains()


@pytest.fixture
def redis(redis_server: RedisServer | RedisClusterServers) -> redis_lib.Redis:
    """A raw client on the test server (bytes responses), for asserting on keys; on a cluster a
    cluster client that puts the engine's hash tag on Sidekiq's plain key names."""
    if isinstance(redis_server, RedisClusterServers):
        return redis_server.tagged_client()  # type: ignore[return-value]
    return redis_server.client()


CHROMIUM = "/usr/bin/chromium"
#: As root on a machine without a network: no sandbox, and none of Chromium's background traffic.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture
def browser(monkeypatch):
    """Debian's Chromium driven by Playwright (its own browser downloads are never used);
    skips with the reason when either is missing."""
    if not shutil.which(CHROMIUM) and not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -r requirements-dev.txt)")
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # plain synchronous code, which Django would otherwise refuse next to a running loop.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()
