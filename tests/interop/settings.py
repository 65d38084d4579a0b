"""Settings for worker subprocesses in the interop tests: the project's, plus this package as an
app so Django autodiscovers ``tests/interop/jobs.py`` (job classes only a worker needs to know).

Used as ``DJANGO_SETTINGS_MODULE=tests.interop.settings`` in WorkerProcess's env.
"""

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.interop"]
