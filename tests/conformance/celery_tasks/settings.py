"""Settings of the workers that run Celery's examples: the test settings plus the apps named in
``$CONFORMANCE_APPS`` (comma-separated), found on ``$PYTHONPATH`` as the examples lay them out
(``proj``, ``demoapp``, the tutorial's ``tasks`` module)."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, *(name for name in os.environ.get("CONFORMANCE_APPS", "").split(",") if name)]
