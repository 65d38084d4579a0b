"""django-tasks-rq's tests/tests.py, from its pinned sdist, ported by port.py (RQ_EDITS)."""

import importlib

from tests.conformance.django_tasks.port import ported_on_path
from tests.conformance.upstream import case_classes

ported_on_path()
globals().update(case_classes(importlib.import_module("django_tasks_suite.test_rq_backend")))
