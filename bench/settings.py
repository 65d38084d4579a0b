"""Settings for benchmark runs: the project's plus the benchmark jobs, quiet logs, DEBUG off."""

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS, LOGGING

# As in production: the demo's DEBUG (on unless DJANGO_DEBUG=0) wraps every database cursor to
# record its queries, which no deployed worker pays for.
DEBUG = False

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]
LOGGING = {**LOGGING, "root": {**LOGGING["root"], "level": "WARNING"}}
