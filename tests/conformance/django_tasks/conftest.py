"""One runworkers for each test module that asks for ``worker`` (this suite's tasks.py installed)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import django
import pytest

from tests.workers import WorkerProcess

#: Django < 6.0 has no django.tasks: nothing here can be imported, so nothing is collected.
collect_ignore_glob = [] if django.VERSION >= (6, 0) else ["*.py"]

SETTINGS_MODULE = "tests.conformance.django_tasks.settings"


@pytest.fixture(scope="module")
def worker(start_suite_worker: Callable[..., Any]) -> Iterator[WorkerProcess]:
    with start_suite_worker(SETTINGS_MODULE, queues=["default", "queue_1", "queue-1"]) as process:
        yield process
