"""What the ported suite takes from Celery's ``t/integration/conftest.py``, as our own code.

Celery's conftest wires a session app and a worker thread through ``celery.contrib.pytest``; here
the same names wire ``jobsapp.celery`` and a worker in the test process (``start_worker``,
conftest.py beside this file). The test modules import these names where they imported Celery's conftest.
"""

from __future__ import annotations

import functools
import os
import re
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest
import redis

from jobsapp import api
from jobsapp.celery import Celery, states
from jobsapp.celery.result import AsyncResult, ResultSet

from . import expectations

#: Read by tests to choose the Redis backend's cases; the worker and results are on Redis.
TEST_BACKEND = "redis://"
TEST_BROKER = "redis://"

#: Bound on one test: a regression fails, never hangs.
_timeout = pytest.mark.timeout(timeout=300)


#: Celery's own marker on its flaky tests: ``pytest.mark.flaky(reruns=5, reruns_delay=2)``
#: (pytest-rerunfailures): a failed test runs again, up to five more times, 2 s apart.
RERUNS = 5
RERUN_DELAY_SECONDS = 2.0


def rerunning(call: Callable[[], Any], *, reruns: int, delay_seconds: float, name: str) -> Any:
    """``call()``, run again after a failure up to ``reruns`` more times, ``delay_seconds``
    apart, as Celery's ``flaky`` marker declares for its test. Each rerun is a warning in the
    run's summary, so a flake stays visible; a refusal (``NotImplementedError``) is never rerun."""
    for attempt in range(reruns + 1):
        try:
            return call()
        except NotImplementedError:
            raise
        except Exception as exc:
            if attempt == reruns:
                raise
            warnings.warn(f"{name} failed ({exc!r}): rerun {attempt + 1} of {reruns}, as Celery's flaky marker declares", stacklevel=1)
            time.sleep(delay_seconds)
    raise AssertionError("unreachable")


def flaky(function: Callable[..., Any]) -> Callable[..., Any]:
    """Celery's ``flaky`` (its conftest's): reruns as its marker declares, within one timeout; a
    test refused in expectations.py fails once, as its refusal says."""
    test_id = f"{function.__module__.rsplit('.', 1)[-1]}.py::{function.__qualname__.replace('.', '::')}"
    if expectations.refusal_for(test_id) is not None:
        return _timeout(function)

    @functools.wraps(function)
    def rerun(*args: Any, **kwargs: Any) -> Any:
        return rerunning(lambda: function(*args, **kwargs), reruns=RERUNS, delay_seconds=RERUN_DELAY_SECONDS, name=function.__qualname__)

    return _timeout(rerun)


def get_redis_connection() -> redis.Redis:
    """A client on the suite's throwaway Redis (``$REDIS_HOST``/``$REDIS_PORT``, set by conftest.py)."""
    return redis.Redis(host=os.environ["REDIS_HOST"], port=int(os.environ["REDIS_PORT"]), socket_timeout=None)


def get_active_redis_channels() -> list[bytes]:
    """The pub/sub channels with a subscriber on the suite's Redis (``PUBSUB CHANNELS``), as Celery's
    conftest lists them: its Redis result backend subscribes to ``celery-task-meta-<id>`` while a
    result is awaited, and its tests check that none is left behind. Results here are read from the
    result store without subscribing, so a test finds no new channel unless one leaks."""
    return list(get_redis_connection().execute_command("PUBSUB CHANNELS"))


def check_for_logs(caplog: pytest.LogCaptureFixture, message: str, max_wait: float = 1.0, interval: float = 0.1) -> bool:
    """Whether a record matching ``message`` is captured within ``max_wait`` seconds."""
    pattern = re.compile(message)
    deadline = time.monotonic() + max_wait
    while True:
        if any(pattern.search(record.message) for record in caplog.records):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


class StillWaiting(Exception):
    """A condition ``Manager`` waits for is not true yet."""


class Manager:
    """The helpers Celery's ``celery.contrib.testing.manager.Manager`` gives the tests, on ``app``."""

    def __init__(self, app: Celery, worker: Any = None) -> None:
        self.app = app
        self.worker = worker  # the session worker (start_worker's), asked directly what it runs

    def wait_for(
        self,
        fun: Callable[..., Any],
        catch: Sequence[type[BaseException]],
        desc: str = "thing",
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        errback: Callable[..., Any] | None = None,
        max_retries: int = 10,
        interval_start: float = 0.1,
        interval_step: float = 0.5,
        interval_max: float = 5.0,
        emit_warning: bool = False,
        **options: Any,
    ) -> Any:
        """Call ``fun`` until it stops raising one of ``catch`` (at most ``max_retries`` more times)."""
        interval = interval_start
        for retries in range(max_retries + 1):
            try:
                return fun(*args, **(kwargs or {}))
            except tuple(catch) as exc:
                if retries == max_retries:
                    raise
                if errback is not None:
                    errback(exc, interval, retries)
                time.sleep(interval)
                interval = min(interval + interval_step, interval_max)
        raise AssertionError(f"unreachable: waiting for {desc}")

    def join(self, r: Any, propagate: bool = False, max_retries: int = 10, **kwargs: Any) -> Any:
        results = r if isinstance(r, ResultSet) else ResultSet([r])
        return results.get(propagate=propagate, **kwargs)

    def inspect(self, timeout: float = 3.0) -> Any:
        return self.app.control.inspect(timeout=timeout)

    def _true_or_raise(self, condition: Callable[[], bool]) -> bool:
        if not condition():
            raise StillWaiting()
        return True

    def assert_accepted(self, ids: Iterable[str], interval: float = 0.5, desc: str = "accepted", **policy: Any) -> bool:
        """Wait until every id is running or done, as the workers' registry shows them."""
        wanted = list(ids)

        def accepted() -> bool:
            inspect = self.inspect()
            seen = {request["id"] for replies in (inspect.active() or {}).values() for request in replies}
            return all(task_id in seen or AsyncResult(task_id).ready() for task_id in wanted)

        return bool(self.wait_for(lambda: self._true_or_raise(accepted), (StillWaiting,), desc=desc, **policy))

    def assert_result_tasks_in_progress_or_completed(
        self, async_results: Iterable[AsyncResult[Any]], interval: float = 0.5, **policy: Any
    ) -> bool:
        results = list(async_results)

        def started() -> bool:
            return all(result.state in (states.STARTED, states.SUCCESS) for result in results)

        return bool(self.wait_for(lambda: self._true_or_raise(started), (StillWaiting,), **policy))

    def wait_until_idle(self, timeout_seconds: float = 30.0) -> bool:
        """As Celery's: purge the queues (what a test left waiting), then wait until the worker
        runs nothing (asked directly, as Celery's ``inspect().active()`` asks its worker; without
        the session worker, as the process list's heartbeats report it). False when it still
        runs tasks after ``timeout_seconds``."""
        while self.app.control.purge():
            pass
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            busy = self.worker.active() if self.worker is not None else sum(process.busy for process in api.ProcessSet.all())
            if not busy:
                return True
            time.sleep(0.02)
        return False
