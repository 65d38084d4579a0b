"""Settings of the worker process the ported Celery integration suite runs against."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.conformance.celery_integration"]
