"""A real Ruby Sidekiq 6.4 process sharing our Redis shows up in jobsapp.api, the dashboard and
the CLI, and obeys the Quiet and Stop buttons; a job our dashboard retries is run by Ruby.

Each test starts its own ``sidekiq -r ruby/worker.rb`` after the per-test flush, so its
heartbeat hash is there from the start (Ruby beats every 5 s).
"""

from __future__ import annotations

import io
import json
import time

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from jobsapp import api, keys
from tests.interop.conftest import RubySidekiqProcess
from tests.workers import wait_until

pytestmark = [pytest.mark.interop, pytest.mark.django_db]

RUNS_KEY = "interop:ruby:runs"  # written by HardWorker in ruby/worker.rb


@pytest.fixture
def ruby_process(redis_server):
    process = RubySidekiqProcess(redis_server, queues=("default", "low"), concurrency=3)
    process.wait_registered()
    yield process
    process.stop()


@pytest.fixture
def staff(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True))
    return client


def ruby_identity(process: RubySidekiqProcess) -> api.Process:
    return next(entry for entry in api.ProcessSet.all() if entry.pid == process.process.pid)


def test_ruby_process_is_listed_by_api_dashboard_metrics_and_cli(ruby_process, staff):
    # Given a live Ruby Sidekiq process
    process = ruby_identity(ruby_process)
    # Then the API reads its heartbeat as Sidekiq wrote it
    assert process.queues == ["default", "low"] and process.concurrency == 3
    assert process.rss_kb > 0 and time.time() - process.beat < 30 and not process.quiet
    assert api.Stats.fetch().processes_size == 1
    # And the dashboard, the metrics and the CLI show it
    busy = staff.get(reverse("jobsapp:busy")).content.decode()
    assert process.identity in busy and "default, low" in busy
    metrics = staff.get(reverse("jobsapp:metrics")).content.decode()
    assert "jobs_processes 1.0" in metrics and "jobs_threads 3.0" in metrics
    out = io.StringIO()
    call_command("jobs", "--json", "processes", stdout=out)
    assert json.loads(out.getvalue())[0]["pid"] == ruby_process.process.pid


def test_quiet_and_stop_buttons_reach_the_ruby_process(ruby_process, staff):
    identity = ruby_identity(ruby_process).identity
    # When an operator presses Quiet
    staff.post(reverse("jobsapp:process_action"), {"identity": identity, "action": "quiet"})
    # Then Ruby takes TSTP on its next heartbeat and reports itself quiet
    wait_until(lambda: ruby_identity(ruby_process).quiet, timeout_seconds=12, message="Ruby reports quiet")
    # When the operator presses Stop, Ruby shuts down and leaves the process set
    staff.post(reverse("jobsapp:process_action"), {"identity": identity, "action": "stop"})
    wait_until(lambda: ruby_process.process.poll() is not None, timeout_seconds=20, message="Ruby exited")
    wait_until(lambda: not api.ProcessSet.all(), timeout_seconds=5, message="Ruby left the process set")


def test_a_job_retried_from_our_dashboard_is_run_by_ruby(ruby_process, staff, redis):
    # Given a HardWorker job waiting in the retry set, as Sidekiq writes it
    item = {
        "class": "HardWorker",
        "args": ["retried from python"],
        "queue": "default",
        "retry": True,
        "jid": "0123456789abcdef01234567",
        "created_at": time.time() - 60,
        "error_class": "RuntimeError",
        "error_message": "boom",
        "failed_at": time.time() - 30,
        "retry_count": 1,
    }
    redis.zadd(keys.RETRY, {json.dumps(item, separators=(",", ":")): time.time() + 3600})
    key = api.RetrySet().find_job(item["jid"]).key
    # When an operator presses "Retry now"
    staff.post(reverse("jobsapp:set_action", args=["retries"]), {"action": "retry", "scope": "selected", "key": key})
    # Then Ruby runs it, with the same jid
    runs = wait_until(
        lambda: [json.loads(raw) for raw in redis.lrange(RUNS_KEY, 0, -1)], timeout_seconds=10, message="Ruby ran the retried job"
    )
    assert runs[0]["jid"] == item["jid"] and runs[0]["args"] == ["retried from python"]
