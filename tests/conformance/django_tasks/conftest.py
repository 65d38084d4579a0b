"""Django's tests/tasks, ported at collection (port.py) and run on JobsBackend.

The ported package lives under the upstream cache; its directory goes on ``sys.path`` here and on
``PYTHONPATH`` for the workers this suite starts (which install it as an app, settings.py, so
they autodiscover its ``tasks.py``). Without the Django sdist (no index), the suite is skipped
with the reason, or fails under CI=true (upstream.require).
"""

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
    from tests.conformance.django_tasks.backends import SuiteWorker  # django.tasks: Django 6 only

    with start_suite_worker(SETTINGS_MODULE, queues=["default", "queue_1", "queue-1"]) as process:
        SuiteWorker.process = process
        yield process
        SuiteWorker.process = None
