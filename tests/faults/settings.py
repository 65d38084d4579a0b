"""Settings for worker subprocesses in the fault tests: the test suite's, plus this package as an
app so Django autodiscovers ``tests/faults/jobs.py`` (the ledger jobs).

Used as ``DJANGO_SETTINGS_MODULE=tests.faults.settings`` in WorkerProcess's env. Scenario 8 (clock
skew) sets ``$JOBSAPP_TEST_CLOCK_OFFSET_SECONDS``: this process's wall clock (``time.time``) then
runs that many seconds ahead (or behind, when negative) of the host's, as
on a host whose NTP is broken. Redis server time is not affected.
"""

import os as _os

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.faults"]

if _os.environ.get("JOBSAPP_TEST_CLOCK_OFFSET_SECONDS"):
    from tests.faults.clock import skew_wall_clock

    skew_wall_clock(float(_os.environ["JOBSAPP_TEST_CLOCK_OFFSET_SECONDS"]))
