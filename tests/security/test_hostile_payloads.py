"""Hostile payloads written straight into Redis, as another client of the same Redis could
(issue 14): no payload may wedge a worker, the dashboard or the CLI, and no failure may loop.

Each case was found breaking the engine: JSON nested 100,000 deep raised RecursionError past
every handler (dead processor threads, 500 pages, a dead sweeper); retry fields such as
``"retry": "yes"`` made the retry policy raise, and the job was put back at the front of its
queue to run again at once, forever.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from jobsapp import keys
from jobsapp.payload import decode
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.recovery import recover_list
from jobsapp.worker.retry import RetryPolicy
from tests.testapp.jobs import RAN_KEY, RecordThenExplode, Rendezvous
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db  # the processor closes stale database connections around a job

DEEP = b'{"class":"tests.testapp.jobs.Record","args":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
INFLIGHT = "jobsapp:inflight:hostile"


def explode_payload(value: str, **fields: object) -> bytes:
    item = {"class": RecordThenExplode.wire_name(), "args": [value], "queue": "default", "jid": "a" * 24, **fields}
    return json.dumps(item).encode()


def run_in_process(redis, raw: bytes):
    redis.lpush(INFLIGHT, raw)
    return Processor(RetryPolicy(redis, INFLIGHT)).process(UnitOfWork(raw, "default"))


def test_json_nested_100000_deep_is_malformed_not_a_recursion_error():
    # Given JSON nested 100,000 deep, and JSON nested deeper than any client may write
    just_too_deep = b'{"class":"X","args":' + b"[" * 102 + b"]" * 102 + b"}"  # 103 levels with the job object
    # When it is decoded, Then it is a MalformedPayload (a ValueError), as every caller expects
    for raw in (DEEP, just_too_deep, b"[" * 100_000):
        with pytest.raises(ValueError, match="nest"):
            decode(raw)
    # And what our client accepts (args nested 100 deep: 101 levels with the job object) decodes
    assert decode(b'{"class":"X","args":' + b"[" * 101 + b"]" * 101 + b"}")["class"] == "X"


def test_a_deeply_nested_job_is_parked_dead_once_by_the_processor(redis):
    # Given the 100,000-deep payload fetched into a process's in-flight list
    # When the processor handles it
    result = run_in_process(redis, DEEP)
    # Then it is in the dead set once, as malformed with its reason, and no longer in flight
    assert result.failed and not result.acknowledge
    dead = [json.loads(member) for member in redis.zrange("dead", 0, -1)]
    assert len(dead) == 1 and dead[0]["class"] == "jobsapp.MalformedPayload"
    assert "nest" in dead[0]["malformed_reason"]
    assert redis.llen(INFLIGHT) == 0


@pytest.mark.parametrize(
    ("fields", "expected_set", "expected_count"),
    [
        ({"retry": "yes"}, "retry", 0),
        ({"retry": None}, "retry", 0),
        ({"retry": 10**200}, "retry", 0),
        ({"retry": -1}, "retry", 0),
        ({"retry": 10**200, "retry_count": 10**100}, "dead", 10_000),  # clamped to RETRY_LIMIT_MAX,
        ({"retry_count": -(10**100)}, "retry", 1),
        ({"retry_count": "3", "retry_queue": ["not", "a", "queue"], "backtrace": 10**200}, "retry", 0),
    ],
    ids=["retry-yes", "retry-null", "retry-10e200", "retry-negative", "count-10e100", "count-negative", "wrong-types"],
)
def test_unusable_retry_fields_are_sanitized_before_arithmetic(redis, fields, expected_set, expected_count):
    # Given a failing job whose retry fields another client wrote
    raw = explode_payload("hostile-retry", **fields)
    # When the processor runs it and it fails
    result = run_in_process(redis, raw)
    # Then the failure is filed once where the default rules say (unusable `retry` is the default
    # of 25 retries; `retry_count` is clamped), not raised back to be run again at once
    assert result.failed and not result.acknowledge
    assert redis.lrange(RAN_KEY, 0, -1) == [b"hostile-retry"]
    assert redis.zcard("retry") + redis.zcard("dead") == 1
    (member,) = redis.zrange(expected_set, 0, -1)
    filed = json.loads(member)
    assert filed["retry_count"] == expected_count
    assert filed["error_class"] == "ValueError"
    assert filed["queue"] == "default"
    assert redis.llen(INFLIGHT) == 0


def test_a_hostile_entry_in_a_dead_process_list_does_not_stop_recovery(redis):
    # Given a dead process whose in-flight list holds the deep payload, then an innocent job
    innocent = explode_payload("innocent")
    redis.rpush("jobsapp:inflight:dead-process", innocent, DEEP)  # DEEP is the oldest (right end)
    # When its list is recovered (sweeper, or a process starting in its slot)
    requeued, buried = recover_list(redis, "dead-process")
    # Then the hostile entry is dead as malformed and the innocent one is back on its queue
    assert (requeued, buried) == (1, 1)
    assert json.loads(redis.zrange("dead", 0, -1)[0])["class"] == "jobsapp.MalformedPayload"
    assert json.loads(redis.lindex("queue:default", 0))["args"] == ["innocent"]
    assert not redis.exists("jobsapp:inflight:dead-process")


def test_dashboard_and_cli_survive_a_deeply_nested_oldest_job(redis, django_user_model):
    # Given the deep payload as the oldest job of a queue, and in each sorted set
    redis.rpush("queue:default", DEEP)
    redis.sadd("queues", "default")
    for set_key in (keys.SCHEDULE, keys.RETRY, keys.DEAD):
        redis.zadd(set_key, {DEEP: 1_700_000_000})
    staff = Client()
    staff.force_login(django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True))
    # When a staff member opens every page, Then each answers 200
    urls = [
        reverse("jobsapp:overview"),
        reverse("jobsapp:stats_json"),
        reverse("jobsapp:queues"),
        reverse("jobsapp:queue", args=["default"]),
        reverse("jobsapp:metrics"),
        *[reverse("jobsapp:job_set", args=[slug]) for slug in ("scheduled", "retries", "dead")],
        reverse("jobsapp:job_set", args=["dead"]) + "?q=class",
    ]
    for url in urls:
        assert staff.get(url).status_code == 200, url
    # And the CLI answers too
    for command in (["stats"], ["queues"], ["schedule"], ["--json", "schedule"], ["retry"], ["dead", "--grep", "x"]):
        call_command("jobs", *command, stdout=io.StringIO())


@pytest.mark.slow
def test_a_worker_survives_hostile_payloads_without_a_hot_loop(redis_server, redis):
    # Given the deep payload first in line, failing jobs with hostile retry fields, and 200 good jobs
    redis.rpush("queue:default", DEEP)
    hostile = [
        explode_payload("hot-yes", retry="yes"),
        explode_payload("hot-null", retry=None),
        explode_payload("hot-huge", retry=10**200, retry_count=10**100),
        explode_payload("hot-count", retry_count=10**100),
    ]
    redis.lpush("queue:default", *hostile)
    redis.lpush("queue:default", *[json.dumps({"class": "tests.testapp.jobs.Record", "args": [f"good-{n}"]}) for n in range(200)])
    redis.sadd("queues", "default")
    # When a worker with five threads drains the queue
    with WorkerProcess(["-c", "5"], redis_url=redis_server.url) as worker:
        wait_until(lambda: redis.llen("queue:default") == 0, message="the queue is drained")
        # Then all five threads are still alive: five jobs can meet while running at once
        Rendezvous.perform_bulk([["threads", 5]] * 5)
        wait_until(lambda: redis.lrange(RAN_KEY, 0, -1).count(b"met:threads") == 5, timeout_seconds=15, message="5 threads met")
        ran = [value.decode() for value in redis.lrange(RAN_KEY, 0, -1)]
        output = worker.output
    # And every good job ran, each hostile job ran once and was filed once, the deep one is dead
    assert sorted(value for value in ran if value.startswith("good-")) == sorted(f"good-{n}" for n in range(200))
    assert sorted(value for value in ran if value.startswith("hot-")) == ["hot-count", "hot-huge", "hot-null", "hot-yes"]
    filed = [json.loads(member) for member in [*redis.zrange("retry", 0, -1), *redis.zrange("dead", 0, -1)]]
    assert sorted(entry["args"][0] for entry in filed if entry["class"] == RecordThenExplode.wire_name()) == sorted(
        ["hot-count", "hot-huge", "hot-null", "hot-yes"]
    )
    assert [entry["class"] for entry in filed].count("jobsapp.MalformedPayload") == 1
    assert "unexpected error" not in output
    assert not [key for key in redis.scan_iter(match="jobsapp:inflight:*") if redis.llen(key)]
