"""Fuzz: payload bytes and field values written straight into Redis (queue, schedule, retry and
dead sets), then a real worker, the dashboard pages and the ``jobs`` CLI run against them.

Whatever the bytes, the worker keeps all its threads and never loops on a job (each fuzzed job
runs at most once before it is filed), every page answers 200 and every CLI command exits
cleanly. Bounded: a few dozen examples, a handful of payloads each, no shrinking database.
"""

from __future__ import annotations

import io
import json
import math

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobsapp import keys
from tests.testapp.jobs import RAN_KEY, Record, RecordThenExplode, Rendezvous
from tests.workers import WorkerProcess, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

CONCURRENCY = 3
FIELDS = [
    "args",
    "kwargs",
    "retry",
    "retry_count",
    "jid",
    "queue",
    "created_at",
    "enqueued_at",
    "failed_at",
    "retried_at",
    "backtrace",
    "retry_queue",
    "dead",
    "error_backtrace",
    "error_message",
    "error_class",
    "tags",
    "at",
    "jobsapp_recovered",
]
HUGE_NUMBERS = st.sampled_from([10**200, -(10**200), 1e308, -1e308, 2**63, -(2**63), 0, -1, 1.5])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | HUGE_NUMBERS | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
classes = st.sampled_from([Record.wire_name(), RecordThenExplode.wire_name(), "NoSuchJob", "os.system", "../x", ""]) | st.text(max_size=10)


@st.composite
def job_objects(draw) -> bytes:
    item = {"class": draw(classes), "args": ["fuzz-ID"]}  # the test gives each job its own id
    for field in draw(st.lists(st.sampled_from(FIELDS), max_size=5, unique=True)):
        item[field] = draw(json_values)
    text = json.dumps(item, allow_nan=True)  # 1e308 * 10 and friends: Infinity, as a foreign client may write
    return text.encode()


payloads = st.one_of(
    job_objects(),
    st.binary(max_size=64),
    st.sampled_from(
        [
            b"[" * 100_000,
            b'{"class":"tests.testapp.jobs.Record","args":' + b"[" * 5000 + b"]" * 5000 + b"}",
            b'{"class":"tests.testapp.jobs.Record","args":[' + b"9" * 5000 + b"]}",
            b'{"class":"tests.testapp.jobs.Record","args":[1e999],"enqueued_at":1e999}',
            b'{"class":"tests.testapp.jobs.Record","args":["x"],"retry":"yes","retry_count":' + b"9" * 100 + b"}",
        ]
    ),
)
scores = st.sampled_from([0.0, 1.0, 1e308, -1e308, math.inf, -math.inf, 1_700_000_000.5, 4_102_444_800.0])


def check_pages_and_cli(client: Client) -> None:
    urls = [
        reverse("jobsapp:overview"),
        reverse("jobsapp:stats_json"),
        reverse("jobsapp:queues"),
        reverse("jobsapp:queue", args=["default"]),
        reverse("jobsapp:busy"),
        reverse("jobsapp:metrics"),
        *[reverse("jobsapp:job_set", args=[slug]) for slug in ("scheduled", "retries", "dead")],
        reverse("jobsapp:job_set", args=["retries"]) + "?q=fuzz",
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
    for command in (["stats"], ["queues"], ["processes"], ["schedule"], ["--json", "schedule"], ["retry"], ["--json", "dead"]):
        call_command("jobs", *command, stdout=io.StringIO())


def test_fuzzed_payloads_never_wedge_a_worker_the_dashboard_or_the_cli(redis_server, redis, django_user_model):
    staff = Client()
    staff.force_login(django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True))
    rounds = iter(range(10**6))
    with WorkerProcess(["-c", str(CONCURRENCY)], redis_url=redis_server.url) as worker:

        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(queued=st.lists(payloads, min_size=1, max_size=6), in_sets=st.lists(st.tuples(payloads, scores), max_size=3))
        def check(queued: list[bytes], in_sets: list[tuple[bytes, float]]) -> None:
            round_number = next(rounds)
            sentinel = f"sentinel-{round_number}"
            queued = [raw.replace(b"fuzz-ID", f"fuzz-{round_number}-{index}".encode()) for index, raw in enumerate(queued)]
            # Given fuzzed payloads in the queue and in each sorted set, then an innocent job
            redis.lpush("queue:default", *queued)
            for raw, score in in_sets:
                raw = raw.replace(b"fuzz-ID", f"in-set-{round_number}".encode())
                for set_key in (keys.SCHEDULE, keys.RETRY, keys.DEAD):
                    redis.zadd(set_key, {raw: score})
            Record.perform_async(sentinel)
            # When the worker drains the queue, Then the innocent job runs and nothing stays in flight
            wait_until(
                lambda: (
                    redis.llen("queue:default") == 0
                    and sentinel.encode() in redis.lrange(RAN_KEY, 0, -1)
                    and not any(redis.llen(key) for key in redis.scan_iter(match="jobsapp:inflight:*"))
                ),
                timeout_seconds=20,
                message=f"{sentinel} ran and the queue is drained",
            )
            # And the dashboard and the CLI show whatever is there
            check_pages_and_cli(staff)

        check()
        # Then every processor thread is still alive: all of them can run at once
        Rendezvous.perform_bulk([["threads", CONCURRENCY]] * CONCURRENCY)
        wait_until(
            lambda: redis.lrange(RAN_KEY, 0, -1).count(b"met:threads") == CONCURRENCY,
            timeout_seconds=15,
            message="every thread met",
        )
        # And no queued fuzzed job ran more than twice (once, and at most once more from the retry
        # set, whose first delay is 15 s or more): none was put back to run again at once
        runs = [value for value in redis.lrange(RAN_KEY, 0, -1) if value.startswith(b"fuzz-")]
        assert max((runs.count(value) for value in set(runs)), default=0) <= 2
        output = worker.output
    assert "unexpected error" not in output, output[-3000:]
