"""Settings for benchmark runs: the project's plus the benchmark jobs, quiet logs."""

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS, LOGGING

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]
LOGGING = {**LOGGING, "root": {**LOGGING["root"], "level": "WARNING"}}
