"""/jobs/metrics: Prometheus text read from Redis at scrape time, asynq's metric set as anchor."""

from __future__ import annotations

import json
import time

import pytest
import redis as redis_lib
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from jobsapp import keys
from tests.jobsapp import sidekiq_data as data
from tests.testapp.jobs import Record

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True))
    return client


def scrape(client: Client, **headers) -> dict[tuple[str, tuple], float]:
    response = client.get(reverse("jobsapp:metrics"), **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def durations_hash(buckets: dict[str, int], total: float) -> str:
    return json.dumps({"buckets": buckets, "sum": total, "count": buckets["+Inf"]})


def test_metrics_report_queues_sets_processes_and_counters(staff, redis):
    ids = data.populate(redis)
    samples = scrape(staff)
    assert samples[("jobs_processed_total", ())] == 123456
    assert samples[("jobs_failed_total", ())] == 789
    assert samples[("jobs_queue_size", (("queue", "default"),))] == 30
    assert samples[("jobs_queue_latency_seconds", (("queue", "default"),))] == pytest.approx(30, abs=2)
    assert samples[("jobs_queue_paused", (("queue", "imports"),))] == 1
    assert samples[("jobs_queue_paused", (("queue", "default"),))] == 0
    assert samples[("jobs_queue_jobs", (("queue", "default"), ("state", "pending")))] == 30
    assert samples[("jobs_queue_jobs", (("queue", "default"), ("state", "active")))] == 1
    for name in ("scheduled", "retry", "dead"):
        assert samples[("jobs_set_size", (("set", name),))] == 1
    assert samples[("jobs_processes", ())] == 1
    assert samples[("jobs_busy_threads", ())] == 1
    assert samples[("jobs_threads", ())] == 10
    assert ids["identity"]


def test_queue_size_gauges_count_prioritised_jobs(staff, redis):
    # Given a queue holding one plain job and two prioritised ones
    Record.set(queue="urgent").perform_async("plain")
    Record.set(queue="urgent", priority=5).perform_async("five")
    Record.set(queue="urgent", priority=-5).perform_async("minus-five")
    # When Prometheus scrapes, Then the queue's size and pending gauges count all three
    samples = scrape(staff)
    assert samples[("jobs_queue_size", (("queue", "urgent"),))] == 3
    assert samples[("jobs_queue_jobs", (("queue", "urgent"), ("state", "pending")))] == 3


def test_duration_histograms_are_summed_over_live_processes(staff, redis):
    first, second = data.process(redis), data.process(redis)
    redis.hset(keys.job_durations(first), "ImportRow", durations_hash({"0.1": 2, "1.0": 3, "+Inf": 4}, 5.5))
    redis.hset(keys.job_durations(second), "ImportRow", durations_hash({"0.1": 1, "1.0": 1, "+Inf": 1}, 0.05))
    redis.hset(keys.job_durations(second), "Other", "not json")
    redis.hset(keys.job_durations("dead:1:000000000000"), "ImportRow", durations_hash({"+Inf": 100}, 1.0))
    samples = scrape(staff)
    label = ("class", "ImportRow")
    assert samples[("jobs_job_duration_seconds_bucket", tuple(sorted([label, ("le", "0.1")])))] == 3
    assert samples[("jobs_job_duration_seconds_bucket", tuple(sorted([label, ("le", "1.0")])))] == 4
    assert samples[("jobs_job_duration_seconds_bucket", tuple(sorted([label, ("le", "+Inf")])))] == 5
    assert samples[("jobs_job_duration_seconds_count", (label,))] == 5
    assert samples[("jobs_job_duration_seconds_sum", (label,))] == pytest.approx(5.55)


def test_a_scrape_costs_a_fixed_number_of_round_trips_with_100_queues(staff, redis, monkeypatch):
    for index in range(100):
        data.enqueue(redis, data.job(queue=f"q{index:03d}"))
    for _ in range(3):
        data.process(redis, running=[data.job()])
    calls = []
    original_pipeline = redis_lib.client.Pipeline.execute
    original_command = redis_lib.Redis.execute_command

    def count_pipeline(self, *args, **kwargs):
        calls.append("pipeline")
        return original_pipeline(self, *args, **kwargs)

    def count_command(self, *args, **kwargs):
        calls.append(args[0])
        return original_command(self, *args, **kwargs)

    monkeypatch.setattr(redis_lib.client.Pipeline, "execute", count_pipeline)
    monkeypatch.setattr(redis_lib.Redis, "execute_command", count_command)
    started = time.perf_counter()
    samples = scrape(staff)
    elapsed = time.perf_counter() - started
    assert len([key for key in samples if key[0] == "jobs_queue_size"]) == 100
    assert len(calls) <= 13, calls  # 2 each: stats, work, processes, durations, periodic jobs, limiters; 1: retained results
    assert elapsed < 1.0


def test_metrics_access_staff_or_bearer_token(client, django_user_model, settings, redis):
    # A scraper without credentials gets 401 with the scheme to use, never a login redirect
    anonymous = client.get(reverse("jobsapp:metrics"))
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    member = Client()
    member.force_login(django_user_model.objects.create_user("member", password="pw-member-123"))
    assert member.get(reverse("jobsapp:metrics")).status_code == 403
    # Wrong credentials are a 403, with or without a token configured
    assert client.get(reverse("jobsapp:metrics"), HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    settings.JOBSAPP = {**settings.JOBSAPP, "METRICS_TOKEN": "s3cret-token"}
    assert client.get(reverse("jobsapp:metrics"), HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get(reverse("jobsapp:metrics"), HTTP_AUTHORIZATION="Basic czNjcmV0").status_code == 403
    samples = scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert ("jobs_processes", ()) in samples
