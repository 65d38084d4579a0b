"""The test settings, with logging as a fresh ``startproject`` has it: no root handler, nothing
configured for the ``jobsapp`` loggers (runworkers then installs its own handler)."""

from tests.settings import *  # noqa: F403

LOGGING = {"version": 1, "disable_existing_loggers": False}
