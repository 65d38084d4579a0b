"""``celery.contrib.pytest``: Celery's pytest fixtures, with the worker inside the test process.

Enable them as Celery's are enabled, in the project's ``conftest.py``::

    pytest_plugins = ("jobsapp.celery.contrib.pytest",)

    def test_add(celery_app, celery_worker):
        assert add.delay(2, 2).get(timeout=10) == 4

``celery_worker`` (one per test) and ``celery_session_worker`` (one for the run) are
``start_worker`` workers (``jobsapp.celery.contrib.testing.worker``) on the Redis the project's
settings name; ``celery_config``, ``celery_parameters``, ``celery_worker_parameters`` and
``celery_includes`` are overridden in a conftest as in Celery. A test whose tasks touch the
database needs pytest-django's database access for the worker's threads too
(``@pytest.mark.django_db(transaction=True)``): the worker is another thread, outside the test's
transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from importlib import import_module
from typing import Any

import pytest

from .testing.worker import TestWorkController, start_worker


@pytest.fixture(scope="session")
def celery_config() -> Mapping[str, Any]:
    """Settings given to the test app (``app.conf.update``): override in a conftest."""
    return {}


@pytest.fixture(scope="session")
def celery_parameters() -> Mapping[str, Any]:
    """Keyword arguments of the test app's ``Celery(...)``."""
    return {}


@pytest.fixture(scope="session")
def celery_worker_parameters() -> Mapping[str, Any]:
    """Keyword arguments of ``start_worker`` (``concurrency``, ``queues``, ``shutdown_timeout``...)."""
    return {}


@pytest.fixture(scope="session")
def celery_includes() -> Sequence[str]:
    """Modules imported before the worker starts (where the tasks are defined)."""
    return ()


@pytest.fixture(scope="session")
def celery_worker_pool() -> str:
    """Celery's pool name: accepted; the worker runs its tasks on threads."""
    return "solo"


@pytest.fixture(scope="session")
def celery_enable_logging() -> bool:
    """Accepted for Celery's sake: logging is the project's, and pytest captures it."""
    return False


def _app(config: Mapping[str, Any], parameters: Mapping[str, Any], includes: Sequence[str]) -> Any:
    from .. import Celery

    app = Celery("celery.tests", **dict(parameters))
    app.conf.update(dict(config))
    for module_path in includes:  # names the suite's own conftest gives (celery_includes), never a payload's
        import_module(module_path)
    return app


@pytest.fixture(scope="session")
def celery_session_app(
    celery_config: Mapping[str, Any], celery_parameters: Mapping[str, Any], celery_includes: Sequence[str]
) -> Iterator[Any]:
    """One app for the run."""
    yield _app(celery_config, celery_parameters, celery_includes)


@pytest.fixture(scope="session")
def celery_session_worker(
    celery_session_app: Any, celery_worker_pool: str, celery_worker_parameters: Mapping[str, Any]
) -> Iterator[TestWorkController]:
    """One worker for the run, in this process."""
    with start_worker(celery_session_app, pool=celery_worker_pool, **dict(celery_worker_parameters)) as worker:
        yield worker


@pytest.fixture
def celery_app(celery_config: Mapping[str, Any], celery_parameters: Mapping[str, Any], celery_includes: Sequence[str]) -> Iterator[Any]:
    """An app for one test."""
    yield _app(celery_config, celery_parameters, celery_includes)


@pytest.fixture
def celery_worker(celery_app: Any, celery_worker_pool: str, celery_worker_parameters: Mapping[str, Any]) -> Iterator[TestWorkController]:
    """A worker for one test, in this process, stopped when the test ends."""
    with start_worker(celery_app, pool=celery_worker_pool, **dict(celery_worker_parameters)) as worker:
        yield worker
