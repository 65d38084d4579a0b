"""Django's tests/tasks/test_immediate_backend.py, from the pinned Django sdist, ported by port.py."""

import importlib

import pytest

from tests.conformance.django_tasks.port import ported_on_path
from tests.conformance.upstream import case_classes
from tests.workers import WorkerProcess

ported_on_path()
globals().update(case_classes(importlib.import_module("django_tasks_suite.test_immediate_backend")))


@pytest.fixture(autouse=True)
def _suite_worker(worker: WorkerProcess) -> None:
    """Every case here enqueues onto the module's worker (WorkerRunBackend waits for it)."""
