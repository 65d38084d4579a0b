"""What a process pays at start-up for importing the engine: not the OpenTelemetry metrics SDK
redis-py would load to note that it is installed, and not the whole operators' API when an admin
module only redacts. Each test runs a fresh interpreter (``sys.modules`` as a worker has it)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]

needs_the_sdk = pytest.mark.skipif(importlib.util.find_spec("opentelemetry.sdk") is None, reason="the OpenTelemetry SDK is not installed")


def run_python(code: str, **environment: str) -> str:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", **environment}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return result.stdout.strip()


@needs_the_sdk
def test_a_worker_process_does_not_import_the_opentelemetry_metrics_sdk():
    # Given the SDK installed (as with the tracing extra and an application's exporter)
    # When a worker process sets Django up and imports the launcher
    code = (
        "import sys, django; django.setup(); import jobsapp.worker.launcher;"
        "print(sorted(name for name in sys.modules if name.startswith('opentelemetry.sdk')), 'redis' in sys.modules)"
    )
    # Then redis-py is imported, and the SDK's metrics package is not
    assert run_python(code) == "[] True"


@needs_the_sdk
def test_redis_py_metrics_still_reach_the_applications_meter_provider(redis_server: RedisServer):
    # Given redis-py imported through jobsapp (the SDK hidden from its import)
    # When the application sets a MeterProvider up afterwards and turns redis-py's metrics on
    code = (
        "import json, sys, jobsapp, redis;"
        "from opentelemetry import metrics;"
        "from opentelemetry.sdk.metrics import MeterProvider;"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader;"
        "reader = InMemoryMetricReader(); metrics.set_meter_provider(MeterProvider(metric_readers=[reader]));"
        "from redis.observability import OTelConfig, get_observability_instance;"
        "get_observability_instance().init(OTelConfig());"
        "client = redis.Redis.from_url(sys.argv[1]); client.set('startup:metric', 1); client.get('startup:metric');"
        "data = reader.get_metrics_data();"
        "print(json.dumps(sorted({m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics})))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    result = subprocess.run([sys.executable, "-c", code, redis_server.url], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    # Then redis-py records its connection metrics through the application's provider
    assert "db.client.connection.create_time" in json.loads(result.stdout)


def test_setting_django_up_imports_only_the_door_of_the_operators_api():
    # Given an admin module that imports jobsapp.api for redact (tracking's, loaded by django.setup())
    # When a process sets Django up
    code = "import sys, django; django.setup(); print(sorted(name for name in sys.modules if name.startswith('jobsapp.api')))"
    # Then only the package is imported, none of its modules
    assert run_python(code) == "['jobsapp.api']"


def test_every_name_of_the_operators_api_is_there_on_first_use():
    # Given a fresh process
    # When each name of jobsapp.api.__all__ is read
    code = (
        "import django; django.setup(); from jobsapp import api;"
        "missing = [name for name in api.__all__ if getattr(api, name, None) is None];"
        "print(missing, api.Workers is api.WorkSet, api.Stats.__module__, set(api.__all__) <= set(dir(api)))"
    )
    # Then every one resolves, from its own module, and dir() lists them
    assert run_python(code) == "[] True jobsapp.api.stats True"


def test_a_name_the_operators_api_does_not_have_is_an_attribute_error():
    from jobsapp import api

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        api.Nope


def test_a_read_subcommand_of_python_m_jobsapp_imports_neither_the_orm_nor_djangos_management(redis_server: RedisServer):
    # Given a script calling `python -m jobsapp stats` on the settings alone
    # When the subcommand has answered
    code = """
import contextlib, io, runpy, sys
sys.argv = ["jobsapp", "stats", "--json"]
output = io.StringIO()
with contextlib.redirect_stdout(output):
    runpy.run_module("jobsapp", run_name="__main__")
from django.apps import apps
print('"processed"' in output.getvalue(), "django.db.models" in sys.modules, "django.core.management" in sys.modules, apps.ready)
"""
    # Then it answered without Django's ORM, its management machinery (with every system check)
    # or the app registry
    assert run_python(code, REDIS_URL=redis_server.url) == "True False False False"
