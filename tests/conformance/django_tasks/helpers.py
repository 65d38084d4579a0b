"""What the ported tests read instead of the dummy backend's in-memory ``results`` list."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from django.tasks import default_task_backend

from jobsapp.connection import get_redis


def queued_results(queue: str = "default") -> list[Any]:
    """The results of the jobs waiting in ``queue``, oldest first, read back with get_result."""
    raw = get_redis().lrange(f"queue:{queue}", 0, -1)
    return [default_task_backend.get_result(json.loads(item)["jid"]) for item in reversed(raw)]


def wait_finished(result: Any, *, timeout_seconds: float = 30.0) -> Any:
    """Refresh ``result`` until the worker has finished it (AssertionError at the timeout)."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        result.refresh()
        if result.is_finished:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"task {result.task.module_path} ({result.id}) did not finish in {timeout_seconds:g} s: {result.status}")
        time.sleep(0.02)


async def await_finished(result: Any, *, timeout_seconds: float = 30.0) -> Any:
    """``wait_finished`` for async tests (``arefresh``)."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        await result.arefresh()
        if result.is_finished:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"task {result.task.module_path} ({result.id}) did not finish in {timeout_seconds:g} s: {result.status}")
        await asyncio.sleep(0.02)
