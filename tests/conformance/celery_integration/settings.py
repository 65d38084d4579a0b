"""Settings of the worker process the ported Celery integration suite runs against.

Its heartbeat comes every second instead of every five: the harness's ``manager`` waits, after
each test, until the worker's heartbeat reports it idle (as Celery's waits for its worker), and
``inspect()`` reads what the heartbeat last wrote, so a fresher heartbeat shortens those waits.
"""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS, JOBSAPP

INSTALLED_APPS = [*INSTALLED_APPS, "tests.conformance.celery_integration"]
JOBSAPP = {**JOBSAPP, "HEARTBEAT_INTERVAL_SECONDS": 1.0}
