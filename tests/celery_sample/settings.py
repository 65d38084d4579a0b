"""Settings of the workers that run tests/celery_sample/tasks.py: the test settings plus this app."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.celery_sample"]
