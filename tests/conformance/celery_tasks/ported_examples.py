"""Celery's ``examples/`` (tutorial, next-steps, django), from the pinned Celery sdist, ported by
changing the import of Celery only (``from celery import`` -> ``from jobsapp.celery import``).

The files are written once per content under the upstream cache (upstream.materialize), laid out
as upstream lays them out: ``examples_dir() / "tutorial" / "tasks.py"`` and so on. The Django
example's ``settings.py``, ``urls.py`` and ``wsgi.py`` are not taken: the suite's settings install
its apps. Without the sdist (no index) the calling module is skipped, or fails under CI=true.
"""

from __future__ import annotations

from pathlib import Path

from tests.conformance import upstream
from tests.conformance.upstream import Edit, Substitution

CELERY_IMPORT = Substitution("from celery import", "from jobsapp.celery import", reason="the one change a migrating user makes")

#: Each example file taken, by its path under examples/, with its edits.
FILES: dict[str, list[Edit]] = {
    "tutorial/tasks.py": [CELERY_IMPORT],
    "next-steps/proj/__init__.py": [],
    "next-steps/proj/celery.py": [CELERY_IMPORT],
    "next-steps/proj/tasks.py": [],
    "django/proj/__init__.py": [],
    "django/proj/celery.py": [CELERY_IMPORT],
    "django/demoapp/__init__.py": [],
    "django/demoapp/models.py": [],
    "django/demoapp/views.py": [],
    "django/demoapp/tasks.py": [CELERY_IMPORT],
    "django/demoapp/migrations/__init__.py": [],
    "django/demoapp/migrations/0001_initial.py": [],
}


def examples_dir() -> Path:
    """The directory of the ported examples (``tutorial/``, ``next-steps/``, ``django/``)."""
    root = upstream.require(upstream.CELERY)
    files = {
        f"examples/{path}": upstream.port(upstream.read(root, f"examples/{path}"), edits, origin=f"celery examples/{path}")
        for path, edits in FILES.items()
    }
    return upstream.materialize("celery-examples", files) / "examples"
