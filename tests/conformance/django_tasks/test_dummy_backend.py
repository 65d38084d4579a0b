"""Django's tests/tasks/test_dummy_backend.py, from the pinned Django sdist, ported by port.py."""

import importlib

from tests.conformance.django_tasks.port import ported_on_path
from tests.conformance.upstream import case_classes

ported_on_path()
globals().update(case_classes(importlib.import_module("django_tasks_suite.test_dummy_backend")))
