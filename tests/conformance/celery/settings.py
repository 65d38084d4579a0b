"""Settings of the worker processes the Celery conformance tests start: the test settings plus
the package of the guides' tasks (ported.py; found on ``PYTHONPATH``, its ``tasks.py``
autodiscovered)."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "celery_guides"]
