"""Arguments whose keys look secret (``JOBSAPP["REDACT_KEYS"]``: password, token, secret,
authorization, api_key...) are redacted wherever they are displayed or logged.

Given a job carrying ``{"password": ..., "api_token": ...}`` that fails in a real worker, Then its
log lines, the ``jobs`` command's listing, the dashboard's job page, the tracking API's event and
the tracking admin never show the secret values, and show ``[REDACTED]`` where one was. (The
dashboard's own pages are also covered by tests/jobsapp/test_dashboard.py.)
"""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from jobsapp import client
from tests.testapp.jobs import Explode
from tests.workers import WorkerProcess, wait_until

SECRET = "hunter2-Very-Secret"
TOKEN = "tok-0123456789abcdef"


@pytest.mark.slow
def test_worker_logs_never_show_secret_arguments(redis_server, redis):
    # (a job that fails on its arguments; an exception message the job writes itself is its own)
    client.push({"class": Explode.wire_name(), "args": ["boom"], "kwargs": {"password": SECRET, "api_token": TOKEN}})
    with WorkerProcess(["-c", "1", "-v", "2"], redis_url=redis_server.url) as worker:
        wait_until(lambda: redis.zcard("retry") == 1, message="the job failed")
    assert SECRET not in worker.output and TOKEN not in worker.output


def test_cli_and_dashboard_show_redacted_arguments(redis, django_user_model, capsys):
    jid = client.push({"class": "HardWorker", "args": ["x", {"Authorization": f"Bearer {TOKEN}", "db_password": SECRET}]})
    call_command("jobs", "queues")
    redis.zadd("retry", {redis.rpop("queue:default"): 1})
    call_command("jobs", "retry", "list")
    shown = capsys.readouterr().out
    assert SECRET not in shown and TOKEN not in shown
    staff = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    page = browser.get(f"/jobs/jobs/{jid}/").content.decode()
    assert SECRET not in page and TOKEN not in page and "[REDACTED]" in page


@pytest.mark.django_db
def test_tracking_api_and_admin_show_redacted_params(redis, django_user_model, settings):
    from tests.tracking.jobs import Succeeds
    from tracking.models import Event, Task

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    owner = django_user_model.objects.create_user("ann", password="pw", is_staff=True, is_superuser=True)
    task = Task.objects.launch(Succeeds, [[{"password": SECRET, "client_secret": TOKEN, "row": 1}]], owner=owner)
    event = Event.objects.get(task=task)
    api = APIClient()
    api.force_authenticate(owner)
    body = json.dumps(api.get(f"/api/tasks/{task.pk}/events/").json()) + json.dumps(api.get(f"/api/events/{event.job_id}/").json())
    assert SECRET not in body and TOKEN not in body and "[REDACTED]" in body
    admin = Client()
    admin.force_login(owner)
    pages = admin.get(f"/admin/tracking/event/{event.pk}/change/").content.decode()
    pages += admin.get(f"/admin/tracking/task/{task.pk}/change/").content.decode()
    assert SECRET not in pages and TOKEN not in pages


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:p@ss@w0rd@127.0.0.1:6380/1", "redis://***@127.0.0.1:6380/1"),
        ("redis://app:s3cret@redis.internal:6379/0", "redis://***@redis.internal:6379/0"),
        ("rediss://redis.internal/0?password=s3cret&ssl_cert_reqs=none", "rediss://redis.internal/0?password=***&ssl_cert_reqs=none"),
        ("unix:///run/redis.sock?db=2&password=p@w", "unix:///run/redis.sock?db=2&password=***"),
        ("redis://[::1]:6379/0", "redis://[::1]:6379/0"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://h:p@ss:not-a-port/0", "<unparseable Redis URL>"),
    ],
)
def test_redis_urls_are_redacted_by_a_url_parser(settings, url, shown):
    # Given a Redis URL with a password (one holding "@" used to leak its tail)
    from jobsapp import connection
    from jobsapp.redaction import redact_url

    # Then the banners', logs' and errors' form of it hides every credential
    assert redact_url(url) == shown
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": url}
    assert connection.describe() == shown
