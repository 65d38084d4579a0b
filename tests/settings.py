"""Settings for the test suite and the worker processes tests start: the project's, plus the
test jobs app. REDIS_URL and DATABASE_URL come from the environment as usual."""

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]
