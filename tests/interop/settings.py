"""Settings for worker subprocesses in the interop tests: the test suite's, plus this package as an
app so Django autodiscovers ``tests/interop/jobs.py`` (job classes only a worker needs to know).

Used as ``DJANGO_SETTINGS_MODULE=tests.interop.settings`` in WorkerProcess's env.
"""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS, JOBSAPP

INSTALLED_APPS = [*INSTALLED_APPS, "tests.interop"]

# A 1-second heartbeat (5 s in production) so the signals Ruby sends and the busy jobs it reads
# show up within the interop module's time budget. What is written is the same.
JOBSAPP = {**JOBSAPP, "HEARTBEAT_INTERVAL_SECONDS": 1.0}
