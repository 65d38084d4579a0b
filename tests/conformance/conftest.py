"""Shared scaffolding of the conformance suites: one real ``runworkers`` per test module.

A suite is a package holding an app (its ``tasks.py``, autodiscovered by the worker) and a
settings module that installs it on top of ``tests.settings``. Its conftest starts the worker
once for a whole module, which keeps the suite fast:

    @pytest.fixture(scope="module")
    def worker(start_suite_worker):
        with start_suite_worker("tests.conformance.x.settings", queues=["default"]) as process:
            yield process
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from tests.redis_server import RedisServer
from tests.workers import WorkerProcess


@pytest.fixture(scope="session")
def start_suite_worker(redis_server: RedisServer) -> Callable[..., Any]:
    """``start_suite_worker(settings_module, queues=[...], concurrency=4)``: a context manager
    running ``runworkers`` with that settings module on the test Redis until the block ends."""

    @contextmanager
    def start(settings_module: str, *, queues: Sequence[str] = ("default",), concurrency: int = 4) -> Iterator[WorkerProcess]:
        args = ["-c", str(concurrency)]
        for queue in queues:
            args += ["-q", queue]
        with WorkerProcess(args, env={"DJANGO_SETTINGS_MODULE": settings_module}, redis_url=redis_server.url) as process:
            yield process

    return start
