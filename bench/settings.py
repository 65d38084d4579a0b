"""Settings for benchmark runs: the project's plus the benchmark jobs, DEBUG off, and logging as
``BENCH_LOGGING`` says: ``quiet`` (the default: the demo's handler, warnings only), ``demo`` (the
demo project's ``LOGGING`` at its INFO level) or ``fresh`` (no ``LOGGING``, as a fresh
``startproject``: runworkers installs its own handler, at INFO)."""

import os

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS, LOGGING

# As in production: the demo's DEBUG (on unless DJANGO_DEBUG=0) wraps every database cursor to
# record its queries, which no deployed worker pays for.
DEBUG = False

INSTALLED_APPS = [*INSTALLED_APPS, "bench"]
_logging = os.environ.get("BENCH_LOGGING", "quiet")
if _logging == "fresh":
    LOGGING = {"version": 1, "disable_existing_loggers": False}
else:
    LOGGING = {**LOGGING, "root": {**LOGGING["root"], "level": "INFO" if _logging == "demo" else "WARNING"}}
