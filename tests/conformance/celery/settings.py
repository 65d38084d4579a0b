"""Settings of the worker processes the Celery conformance tests start: the test settings plus
the app holding the ported tasks (autodiscovered ``tasks.py``)."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.conformance.celery"]
