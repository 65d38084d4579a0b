"""One real ``runworkers`` per test module, with the ported tasks, on the suite's throwaway Redis.

The worker outlives the per-test FLUSHALL (it re-registers at its next heartbeat and keeps
fetching), so each case costs its own round trips only. Errbacks write to a file per module
(``$CELERY_CONFORMANCE_ERRORS``), read with ``errors_written()``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis_server import RedisServer
from tests.workers import WorkerProcess

#: Seconds a case waits for a value before it fails (a regression fails, never hangs).
TIMEOUT = 20


@pytest.fixture(scope="module")
def errors_file() -> Iterator[Path]:
    handle, name = tempfile.mkstemp(prefix="celery-conformance-errors-")
    os.close(handle)
    path = Path(name)
    os.environ["CELERY_CONFORMANCE_ERRORS"] = str(path)
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def worker(redis_server: RedisServer, errors_file: Path) -> Iterator[WorkerProcess]:
    process = WorkerProcess(
        ["-c", "4", "-q", "default", "-q", "critical", "-q", "priority.high"],
        env={"DJANGO_SETTINGS_MODULE": "tests.conformance.celery.settings", "CELERY_CONFORMANCE_ERRORS": str(errors_file)},
        redis_url=redis_server.url,
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture
def errors_written(errors_file: Path):
    errors_file.write_text("")

    def read() -> str:
        return errors_file.read_text()

    return read
