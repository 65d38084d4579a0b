"""Celery's integration suite (``t/integration/`` of the pinned sdist) on ``jobsapp.celery``.

At import, the upstream files are read from the pinned sdist (``tests/conformance/upstream.py``:
downloaded once into its cache, sha256 checked) and ported into ``ported/t/`` (port.py: imports
only; git-ignored), which pytest then collects as the package ``t.integration``, Celery's. When the package index cannot be reached,
nothing is ported and ``test_suite_source.py`` skips with pip's reason (fails under CI).

The fixtures Celery's conftest gives the tests are rewired here:
``celery_session_app``/``celery_app``/``app`` are a ``jobsapp.celery.Celery`` app,
``celery_session_worker`` is, as Celery's, one worker for the whole suite on threads of the test
process (``jobsapp.celery.contrib.testing.worker.start_worker``: the engine ``runworkers`` runs)
on the throwaway Redis, and ``manager`` is harness.Manager. Tests the project refuses on purpose (they
need AMQP, kombu's connection pool or Celery's internal tracer) are listed in expectations.py
with the reason: each must fail with the loud error named there, never pass or hang.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance import upstream
from tests.redis_server import RedisServer

from . import expectations
from .harness import rerunning
from .port import PORTED, port

try:
    port(upstream.source(upstream.CELERY), PORTED)
    UNAVAILABLE = ""
except upstream.IndexUnreachable as error:  # test_suite_source.py says so (a skip, or a failure in CI)
    UNAVAILABLE = str(error)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "flaky: Celery's rerun marker (pytest-rerunfailures' reruns, reruns_delay): honoured below")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """A test Celery marks ``flaky(reruns=N, reruns_delay=S)`` runs again after a failure, as
    Celery's own run of it does (``harness.rerunning``: each rerun a warning, a refusal never)."""
    marker = pyfuncitem.get_closest_marker("flaky")
    if marker is None or (_ported(pyfuncitem.path) and expectations.refusal_for(_test_id(pyfuncitem)) is not None):
        return None  # a refused test fails once, as its refusal says: no reruns
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    rerunning(
        lambda: pyfuncitem.obj(**arguments),
        reruns=int(marker.kwargs.get("reruns", 1)),
        delay_seconds=float(marker.kwargs.get("reruns_delay", 0)),
        name=pyfuncitem.name,
    )
    return True


def _ported(path: Path) -> bool:
    return "/celery_integration/ported/" in path.as_posix()


def _test_id(item: pytest.Item) -> str:
    """``test_tasks.py::test_tasks::test_name``: the id expectations.py uses."""
    return item.nodeid.split("/ported/t/integration/", 1)[1]


def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> pytest.Class | None:
    """Celery names its test classes ``test_*`` (its ``python_classes``); collect them as such."""
    if isinstance(obj, type) and name.startswith("test_") and _ported(collector.path):
        return pytest.Class.from_parent(collector, name=name, obj=obj)  # type: ignore[arg-type]
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    not_ready = [item for item in items if _ported(item.path) and not expectations.collected(_test_id(item))]
    if not_ready:
        config.hook.pytest_deselected(items=not_ready)
        items[:] = [item for item in items if item not in not_ready]
    for item in items:
        if not _ported(item.path):
            continue
        test_id = _test_id(item)
        refusal = expectations.refusal_for(test_id)
        if refusal is not None:
            item.add_marker(pytest.mark.xfail(strict=refusal.strict, raises=refusal.raises, reason=refusal.reason))


@pytest.fixture(scope="package")
def celery_session_app(redis_server: RedisServer) -> Iterator[object]:
    from jobsapp.celery import Celery, current

    os.environ["REDIS_HOST"] = "127.0.0.1"
    os.environ["REDIS_PORT"] = str(redis_server.port)
    app = Celery("celery.tests")
    app.conf.update(broker_url=redis_server.url, result_backend=redis_server.url, result_extended=True, task_create_missing_queues=False)
    yield app
    current.set_current_app(None)  # the modules after this suite see no app of its (task_always_eager, ...)


# "package": the worker stops after this suite's last test, so it never takes the jobs of the
# test modules that run after it on the same Redis
@pytest.fixture(scope="package")
def celery_session_worker(celery_session_app: object, redis_server: RedisServer) -> Iterator[object]:
    """Celery's session worker: as in Celery's suite, a worker on threads of the test process
    (``start_worker``, the engine ``runworkers`` runs in each of its processes), so what the tests
    read in this process (``task_received`` receivers, ``celery.worker.state``) is the worker's."""
    from django.test import override_settings

    from jobsapp import connection
    from jobsapp.celery.contrib.testing.worker import start_worker

    # the tasks are the test modules' own imports (t.integration.tasks), and the class-based task is
    # registered by its test with the session app, as in Celery's suite: nothing else is imported
    # here (another Celery app made here would become the current one, whose conf the canvas reads)
    redis_server.client().flushall()  # once, as Celery's suite starts on an empty broker; not per test (below)
    # a heartbeat every second instead of every five: ``manager`` waits after each test until the
    # heartbeat reports the worker idle, and inspect() reads what the heartbeat last wrote
    from django.conf import settings

    engine = {**getattr(settings, "JOBSAPP", {}), "REDIS_URL": redis_server.url, "HEARTBEAT_INTERVAL_SECONDS": 1.0, "FETCH_BATCH_SIZE": 4}
    # 4 threads, where Celery's test worker has 1: a test gives 42 failing tasks and their errbacks a
    # second after the first errback, which one thread does not always do on a loaded machine; and
    # no more, as tests fill the worker with four 2 s tasks to keep the next one waiting
    # (test_revoked, test_expired). A fetch takes at most 4 jobs ahead, as Celery's worker
    # prefetches 4 messages (worker_prefetch_multiplier): what a test leaves queued is purged by
    # the next wait_until_idle instead of running in the next test (test_revoked_by_headers_complex_canvas
    # leaves fifteen 2 s tasks behind between its rounds, all within its 20 s timeout)
    with override_settings(JOBSAPP=engine, REDIS_URL=redis_server.url):
        connection.reset()
        with start_worker(celery_session_app, concurrency=4, queues=["default"], shutdown_timeout=10.0) as worker:
            yield worker
        connection.reset()


@pytest.fixture(autouse=True)
def _engine_on_test_redis(redis_server: RedisServer, settings: object) -> Iterator[None]:
    """The suite's tests share one Redis without emptying it between them, as Celery's share a
    broker (the root conftest's fixture of this name empties it before every test, which would
    also wipe the worker's registration that ``inspect()`` reads until its next heartbeat)."""
    from jobsapp import connection, middleware, testing

    settings.JOBSAPP = {**getattr(settings, "JOBSAPP", {}), "REDIS_URL": redis_server.url}  # type: ignore[attr-defined]
    settings.REDIS_URL = redis_server.url  # type: ignore[attr-defined]
    connection.reset()
    middleware.reset_chains()
    yield
    testing.set_mode("disabled")
    testing.clear_all()
    connection.reset()
    middleware.reset_chains()


@pytest.fixture
def celery_app(celery_session_app: object) -> object:
    return celery_session_app


@pytest.fixture
def app(celery_app: object) -> object:
    return celery_app


@pytest.fixture
def manager(app: object, celery_session_worker: object) -> Iterator[object]:
    from .harness import Manager

    manager = Manager(app, celery_session_worker)  # type: ignore[arg-type]
    yield manager
    # as Celery's fixture: the worker left busy is logged, not a failure of the test; bounded, so a
    # test that leaves long tasks running (they go on into the next test) ends within its timeout
    if not manager.wait_until_idle(timeout_seconds=5.0):
        logging.getLogger(__name__).warning("the worker is still running tasks after the test (the next test's wait covers them)")


@pytest.fixture
def celery_worker() -> None:
    pytest.fail("the integration suite runs against one shared session worker (celery_session_worker)")


@pytest.fixture(scope="package", autouse=True)
def _warnings_given_once_stay_per_suite() -> Iterator[None]:
    """jobsapp.celery warns once per process about an ignored option; what this suite triggers
    (argsrepr, acks_late, ...) is forgotten after it, so later test modules see their own warnings."""
    from jobsapp.celery import options

    before = set(options._warned)
    yield
    options._warned.intersection_update(before)


@pytest.fixture(autouse=True)
def _the_worker_runs_for_every_ported_test(request: pytest.FixtureRequest) -> None:
    """Celery's session worker is up for the whole suite (some tests push tasks without asking
    for ``manager``, relying on an earlier test to have started it): start it for any test."""
    if _ported(request.path):
        request.getfixturevalue("celery_session_worker")
