"""Expiring jobs: ``sidekiq_options(expires_in=seconds)`` stamps Sidekiq Pro's ``expires_at`` at
push; a job fetched past it is dropped unrun, acknowledged, counted, logged and told to middleware."""

from __future__ import annotations

import json
import logging
import re
import time

import pytest
from django.test import Client
from django.urls import reverse

from jobsapp import Job, client, keys, periodic, sidekiq_options
from jobsapp.api import Stats
from jobsapp.connection import get_redis
from jobsapp.middleware import ServerMiddleware
from jobsapp.payload import decode
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy
from tests.testapp.jobs import RAN_KEY, ExpiringRecord, Record, UniqueRecord
from tests.workers import WorkerProcess, wait_until

INFLIGHT = keys.inflight("expiry-test")


def run_next(redis, queue: str = "default"):
    """Take the next job of ``queue`` as a fetcher would, and run it in this thread."""
    raw = redis.lmove(f"queue:{queue}", INFLIGHT, "RIGHT", "LEFT")
    return Processor(RetryPolicy(get_redis(), INFLIGHT)).process(UnitOfWork(raw, queue)), decode(raw)


def queued(redis, queue: str = "default") -> list[dict]:
    return [json.loads(raw) for raw in redis.lrange(f"queue:{queue}", 0, -1)]


def test_push_stamps_sidekiq_pros_expires_at_from_the_run_at_time(redis):
    # Given a job pushed now with 30 s to live, and one scheduled in an hour with 60 s to live
    before = time.time()
    Record.set(expires_in=30).perform_async("now")
    Record.set(expires_in=60).perform_in(3600, "later")
    after = time.time()
    # Then each payload keeps expires_in and carries the absolute expires_at Pro writes
    (now_job,) = queued(redis)
    assert now_job["expires_in"] == 30 and before + 30 <= now_job["expires_at"] <= after + 30
    ((member, run_at),) = redis.zrange("schedule", 0, -1, withscores=True)
    later_job = json.loads(member)
    assert later_job["expires_at"] == pytest.approx(run_at + 60)
    # And an expires_at already there (a job pushed again, or by Ruby) is kept as it is
    client.push({"class": Record.wire_name(), "args": ["kept"], "expires_in": 5, "expires_at": 1234.5})
    assert queued(redis)[0]["expires_at"] == 1234.5


def test_bulk_push_stamps_each_job_from_its_own_run_at(redis):
    # Given a bulk push with one immediate and one scheduled job, both with 10 s to live
    at = time.time() + 100
    client.push_bulk({"class": Record.wire_name(), "args": [["a"], ["b"]], "at": [None, at], "expires_in": 10})
    # Then the immediate one expires 10 s from now and the scheduled one 10 s after its run-at
    (immediate,) = queued(redis)
    assert immediate["expires_at"] == pytest.approx(time.time() + 10, abs=2)
    (member,) = redis.zrange("schedule", 0, -1)
    assert json.loads(member)["expires_at"] == pytest.approx(at + 10)


@pytest.mark.parametrize("bad", [0, -1, "1h", True, 2_000_000_000])
def test_a_bad_expires_in_is_refused_at_declaration_and_at_push(redis, bad):
    with pytest.raises(ValueError, match="expires_in must be a"):

        @sidekiq_options(expires_in=bad)
        class Bad(Job):
            abstract = True

    with pytest.raises(ValueError, match="expires_in must be a"):
        Record.set(expires_in=bad).perform_async("x")
    assert redis.llen("queue:default") == 0 and redis.zcard("schedule") == 0


class Witness(ServerMiddleware):
    seen: list[tuple[str, object, str]] = []

    def call(self, job, item, queue, call_next):
        Witness.seen.append(("call", item["jid"], queue))
        return call_next()

    def on_dead(self, job_class, item, exception, *, reason):
        Witness.seen.append(("on_dead", exception, reason))


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_an_expired_job_is_never_run_but_acked_counted_logged_and_told(redis, settings, caplog):
    # Given server middleware, and a unique job whose expires_at (as Pro writes it) has passed
    settings.JOBSAPP = {**settings.JOBSAPP, "SERVER_MIDDLEWARE": [f"{__name__}.Witness"]}
    Witness.seen = []
    jid = UniqueRecord.set(expires_in=1).perform_async("stale")
    raw = redis.lpop("queue:default")
    redis.rpush("queue:default", raw.replace(b'"expires_at":', b'"expires_at":1000.0,"was":'))
    assert redis.keys("jobsapp:unique:*")
    # When a worker takes it
    with caplog.at_level(logging.WARNING, logger="jobsapp.expiry"):
        result, item = run_next(redis)
    # Then it did not run, no middleware call wrapped it, and it is acknowledged as a success
    assert redis.llen(RAN_KEY) == 0 and item["jid"] == jid
    assert (result.acknowledge, result.failed) == (True, False)
    assert Witness.seen == [("on_dead", None, "expired")]
    # And it is counted (lifetime and today), logged, in no set, and its unique lock is released
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert redis.get("jobsapp:stat:expired") == b"1" and redis.get(f"jobsapp:stat:expired:{today}") == b"1"
    assert 0 < redis.ttl(f"jobsapp:stat:expired:{today}") <= 5 * 365 * 24 * 3600
    assert Stats.fetch().expired == 1
    assert any("expired" in record.message and jid in record.message for record in caplog.records)
    assert redis.zcard("retry") == redis.zcard("dead") == 0
    assert not redis.keys("jobsapp:unique:*")


@pytest.mark.django_db  # a job run closes stale Django connections, as a worker does
def test_a_job_within_its_expiry_runs_and_a_garbled_expiry_never_drops_a_job(redis):
    # Given a job with time left, and one whose expires_at another client garbled
    Record.set(expires_in=60).perform_async("fresh")
    client.push({"class": Record.wire_name(), "args": ["garbled"], "expires_at": "yesterday"})
    # When both are taken, Then both run and nothing is counted expired
    run_next(redis)
    run_next(redis)
    assert sorted(redis.lrange(RAN_KEY, 0, -1)) == [b"fresh", b"garbled"]
    assert redis.get("jobsapp:stat:expired") is None


@pytest.mark.slow
def test_a_worker_drops_an_expired_job_and_runs_the_rest(redis_server, redis):
    # Given an expired job (as a Ruby Sidekiq Pro client writes it) queued before a fresh one
    client.push({"class": Record.wire_name(), "args": ["stale"], "expires_in": 1, "expires_at": time.time() - 5})
    Record.set(expires_in=60).perform_async("fresh")
    # When a worker runs
    with WorkerProcess(["-c", "2"], redis_url=redis_server.url) as worker:
        wait_until(lambda: redis.get("stat:processed") == b"2", message="both jobs were acknowledged")
    # Then only the fresh one ran, the stale one is counted expired, and the log says so
    assert redis.lrange(RAN_KEY, 0, -1) == [b"fresh"]
    assert redis.get("jobsapp:stat:expired") == b"1"
    assert "expired" in worker.output and redis.llen(f"jobsapp:inflight:{worker.identity}") == 0


def test_a_periodic_job_with_expires_in_expires_that_long_after_its_tick_is_pushed(redis):
    # Given a periodic job whose class has 30 s to start
    job = periodic.build("expiring", {"class": ExpiringRecord.wire_name(), "every": 10})
    now = periodic.server_time(get_redis())
    periodic.register(get_redis(), job, server_now=now - 10)
    # When its tick is claimed (the claim script pushes it)
    pushed, outcome, jid = periodic.claim(get_redis(), job, job.previous_tick(now), created_at=now)
    # Then the payload carries Pro's expires_at, 30 s after the push
    assert (pushed, outcome) == (True, "enqueued")
    (item,) = queued(redis)
    assert item["jid"] == jid and item["expires_in"] == 30 and item["expires_at"] == pytest.approx(now + 30)


@pytest.mark.django_db
def test_the_expired_count_is_on_the_dashboard_the_stats_json_and_the_metrics(redis, django_user_model):
    # Given three jobs counted expired
    redis.set("jobsapp:stat:expired", 3)
    staff = Client()
    staff.force_login(django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True))
    # When the overview, its polled JSON and the Prometheus metrics are read
    overview = staff.get(reverse("jobsapp:overview")).content.decode()
    stats = staff.get(reverse("jobsapp:stats_json")).json()
    metrics = staff.get(reverse("jobsapp:metrics")).content.decode()
    # Then each shows it
    assert re.search(r'data-stat="expired">3<', overview) and ">Expired<" in overview
    assert stats["expired"] == 3
    assert re.search(r"^jobs_expired_total 3\.0$", metrics, flags=re.MULTILINE)
