"""Settings of a worker that also ticks tests/celery_sample/beat/tasks.py's ``beat_schedule``
(never imported by the test process: its schedule would join every periodic job there)."""

from tests.celery_sample.settings import *  # noqa: F403
from tests.celery_sample.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.celery_sample.beat"]
