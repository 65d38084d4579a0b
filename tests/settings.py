"""Settings for the test suite and the worker processes tests start: the project's, plus the
test jobs app. REDIS_URL and DATABASE_URL come from the environment as usual."""

from project.settings import *  # noqa: F403
from project.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]

# Worker subprocesses started by tests may get engine settings through the environment, as
# JSON (e.g. short heartbeat and sweep intervals), so a test can wait seconds instead of minutes.
import json as _json  # noqa: E402
import os as _os  # noqa: E402
from typing import Any as _Any  # noqa: E402

from project.settings import JOBSAPP as _JOBSAPP  # noqa: E402

# The engine's own tests run without the tracking middleware (tracking's tests add it, and pass
# it to the workers they start through JOBSAPP_TEST_OVERRIDES).
# runworkers without -P runs one process here (the default is one per CPU), as tests expect
_ONE_PROCESS: _Any = {"PROCESSES": 1}
JOBSAPP = {
    **_JOBSAPP,
    **_ONE_PROCESS,
    "CLIENT_MIDDLEWARE": [],
    "SERVER_MIDDLEWARE": [],
    **_json.loads(_os.environ.get("JOBSAPP_TEST_OVERRIDES", "{}")),
}
# The suite on a Redis Cluster (tests/conftest.py): cluster mode from the start, so key names a
# test module computes when it is imported carry the hash tag too.
if _os.environ.get("JOBSAPP_TEST_REDIS_CLUSTER"):
    JOBSAPP["REDIS_CLUSTER"] = True

# On SQLite the test database is a file, not memory, so worker subprocesses that tests start
# can open the same database (tests pass its path to them as DATABASE_URL). One per test run.
from project.settings import BASE_DIR, DATABASES  # noqa: E402

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "var" / f"test-{_os.getpid()}.sqlite3")}
    (BASE_DIR / "var").mkdir(exist_ok=True)

# The project's cache is a Redis named at import time; tests must not write to a Redis they did
# not start, so the cache lives in process memory.
# A django-redis alias exists for the worker subprocesses that test JOBSAPP["REDIS_CACHE_ALIAS"]
# (they get the test server's REDIS_URL); nothing in the test process itself uses it.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "jobs-redis": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": _os.environ.get("REDIS_URL", "redis://127.0.0.1:1/0"),
    },
}
# A django-redis Sentinel alias for the worker subprocesses that test Sentinel through a cache
# alias: $JOBSAPP_TEST_SENTINEL_CACHE is the JSON of the CACHES entry.
if _os.environ.get("JOBSAPP_TEST_SENTINEL_CACHE"):
    CACHES["jobs-sentinel"] = _json.loads(_os.environ["JOBSAPP_TEST_SENTINEL_CACHE"])

# django.tasks (Django 6.0+) on the engine: tests/testapp/tasks.py defines the tasks.
import django as _django  # noqa: E402

if _django.VERSION >= (6, 0):
    TASKS = {"default": {"BACKEND": "jobsapp.django_tasks.JobsBackend", "QUEUES": ["default", "critical"]}}
