"""Fixtures of the fault scenarios (issue 4): a ledger Redis of its own, worker subprocesses that
know the ledger jobs, and a table of measured numbers printed at the end of the run.

Every scenario is bounded in time. The fast versions run in the normal suite; ``JOBSAPP_SOAK=1``
makes them longer and harder (more jobs, more kills, production intervals) — see soak.py.
Set ``JOBSAPP_FAULTS_REPORT=path.json`` to have the measurements written as JSON as well.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.redis_server import RedisServer
from tests.workers import WorkerProcess

SOAK = os.environ.get("JOBSAPP_SOAK") == "1"

#: Short intervals so a dead process's orphans come back in seconds, not the production 90.
FAST_LIVENESS = {"HEARTBEAT_INTERVAL_SECONDS": 0.5, "ORPHAN_SWEEP_INTERVAL_SECONDS": 0.5, "PROCESS_TTL_SECONDS": 3}

_measurements: dict[str, dict[str, Any]] = {}


@pytest.fixture(scope="session")
def ledger_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    os.environ["LEDGER_REDIS_URL"] = server.url
    yield server
    server.stop()


@pytest.fixture
def ledger(ledger_server: RedisServer):
    client = ledger_server.client()
    client.flushall()
    return client


@pytest.fixture
def measure() -> Callable[..., None]:
    """``measure("1 reliable", lost=0, duplicates=3)``: a row of the end-of-run table."""

    def record(scenario: str, **numbers: Any) -> None:
        _measurements.setdefault(scenario, {}).update(numbers)

    return record


@pytest.fixture
def start_worker(ledger_server: RedisServer, redis_server: RedisServer) -> Iterator[Callable[..., WorkerProcess]]:
    """``start_worker(["-c", "10"], overrides={...}, env={...})``: a started runworkers subprocess
    with the ledger jobs (already started: stop() it, never use it in a `with`, which would start a
    second process); every one still running is killed at the end of the test."""
    started: list[WorkerProcess] = []

    def start(
        args: list[str], *, overrides: dict[str, Any] | None = None, env: dict[str, str] | None = None, redis_url: str | None = None
    ) -> WorkerProcess:
        worker_env = {
            "DJANGO_SETTINGS_MODULE": "tests.faults.settings",
            "LEDGER_REDIS_URL": ledger_server.url,
            "JOBSAPP_TEST_OVERRIDES": json.dumps(overrides or {}),
            **(env or {}),
        }
        worker = WorkerProcess(args, worker_env, redis_url=redis_url or redis_server.url)
        started.append(worker)
        return worker.start()

    yield start
    for worker in started:
        if worker.process is not None and worker.process.poll() is None:
            worker._kill_group()
        worker.redis.close()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _measurements:
        return
    terminalreporter.section("fault scenarios: measured")
    for scenario, numbers in sorted(_measurements.items()):
        shown = ", ".join(f"{name}={value:.2f}" if isinstance(value, float) else f"{name}={value}" for name, value in numbers.items())
        terminalreporter.write_line(f"scenario {scenario}: {shown}")
    path = os.environ.get("JOBSAPP_FAULTS_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as report:
            json.dump(_measurements, report, indent=2, sort_keys=True)
