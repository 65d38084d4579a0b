"""Sharding: JOBSAPP["SHARDS"] maps job classes and queues to named Redis servers; the client
pushes to the right one, ``runworkers --shard`` serves one, the CLI, the dashboard and the
metrics pick one. Two real Redis servers: the suite's (shard "default") and one of this module."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.test import Client

from jobsapp import UnknownShard, connection, shards
from tests.redis_server import RedisServer
from tests.testapp.jobs import RAN_KEY, HardWorker, ImportRow, Noop, Record
from tests.workers import WorkerProcess, wait_until


@pytest.fixture(scope="module")
def second_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def bulk(second_server, settings):
    """Shard "bulk" on the second server: HardWorker jobs and the "imports" queue live there."""
    client = second_server.client()
    client.flushall()
    settings.JOBSAPP = {
        **settings.JOBSAPP,
        "SHARDS": {"bulk": {"REDIS_URL": second_server.url, "QUEUES": ["imports"], "CLASSES": ["HardWorker"]}},
    }
    connection.reset()
    return client


def test_jobs_are_pushed_to_the_shard_of_their_class_or_queue(bulk, redis):
    # When jobs are pushed: one by class, one by its class's queue, one by an explicit queue,
    # one scheduled, one bulk, and one that no shard claims
    HardWorker.perform_async("by class", 1)
    ImportRow.perform_async(7)
    Noop.set(queue="imports").perform_async("by queue")
    ImportRow.perform_in(600, 8)
    ImportRow.perform_bulk([[1], [2], [3]])
    Noop.perform_async("unclaimed")
    # Then each is on its shard's server, and only there
    assert bulk.llen("queue:default") == 1 and json.loads(bulk.lindex("queue:default", 0))["class"] == "HardWorker"
    assert bulk.llen("queue:imports") == 5
    assert bulk.zcard("schedule") == 1
    assert bulk.smembers("queues") == {b"default", b"imports"}
    assert redis.llen("queue:default") == 1 and json.loads(redis.lindex("queue:default", 0))["args"] == ["unclaimed"]
    assert not redis.exists("queue:imports") and not redis.exists("schedule")


def test_runworkers_shard_serves_its_shards_queues_only(bulk, redis, second_server):
    # Given a job for each shard, on the same queue name's routing: "imports" is bulk's
    Record.set(queue="imports").perform_async("on bulk")
    Record.perform_async("on default")
    overrides = {"SHARDS": {"bulk": {"REDIS_URL": second_server.url, "QUEUES": ["imports"]}}}
    # When a worker serves shard bulk, without -q
    with WorkerProcess(
        ["--shard", "bulk", "-P", "2", "-c", "2"], {"JOBSAPP_TEST_OVERRIDES": json.dumps(overrides)}, redis_url=second_server.url
    ) as worker:
        # Then it runs bulk's job (its routed queue, its Redis) and never touches the default shard
        wait_until(lambda: bulk.llen(RAN_KEY) == 1, message="the bulk job ran on the bulk server")
        # (both -P children inherited the shard: both registered on the bulk server)
        assert len(worker.identities) == 2 and all(worker.info(identity)["queues"] == ["imports"] for identity in worker.identities)
        assert "(shard 'bulk')" in worker.output
    assert bulk.lrange(RAN_KEY, 0, -1) == [b"on bulk"]
    assert redis.llen("queue:default") == 1 and not redis.exists(RAN_KEY) and not redis.scard("processes")


def test_a_periodic_job_ticks_only_on_its_shard(bulk, redis, redis_server, second_server):
    # Given a periodic job routed to shard bulk (by its queue), and a worker on each shard
    overrides = {
        "SHARDS": {"bulk": {"REDIS_URL": second_server.url, "QUEUES": ["imports"]}},
        "PERIODIC": {"tick": {"class": "tests.testapp.jobs.Record", "every": 1, "args": ["tick"], "queue": "imports"}},
    }
    env = {"JOBSAPP_TEST_OVERRIDES": json.dumps(overrides)}
    with (
        WorkerProcess(["-c", "1"], env, redis_url=redis_server.url),
        WorkerProcess(["--shard", "bulk", "-c", "1"], env, redis_url=second_server.url),
    ):
        # When ticks pass
        wait_until(lambda: bulk.llen(RAN_KEY) >= 2, timeout_seconds=15, message="two ticks ran on bulk")
    # Then they were claimed and run on bulk only: the default shard's worker never pushed one
    assert not redis.exists("queue:imports") and not redis.exists(RAN_KEY)
    assert not [key for key in redis.scan_iter(match="cron_job*")]


def test_runworkers_refuses_an_unknown_shard(bulk):
    with pytest.raises(CommandError, match=r"no shard named 'nope'; the shards are: default, bulk"):
        call_command("runworkers", "--shard", "nope")


def test_cli_picks_a_shard(bulk, redis):
    ImportRow.perform_async(1)
    Noop.perform_async()
    out = io.StringIO()
    call_command("jobs", "--shard", "bulk", "--json", "queues", stdout=out)
    assert [(queue["name"], queue["size"]) for queue in json.loads(out.getvalue())] == [("imports", 1)]
    out = io.StringIO()
    call_command("jobs", "--json", "queues", stdout=out)
    assert [(queue["name"], queue["size"]) for queue in json.loads(out.getvalue())] == [("default", 1)]
    with pytest.raises(CommandError, match="no shard named 'nope'"):
        call_command("jobs", "--shard", "nope", "queues")
    assert shards.current() == shards.DEFAULT  # the command's choice did not leak into the process


@pytest.mark.django_db
def test_dashboard_and_metrics_pick_a_shard(bulk, redis, django_user_model):
    user = django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True)
    browser = Client()
    browser.force_login(user)
    ImportRow.perform_async(1)
    Noop.set(queue="only-on-default").perform_async()
    # The default shard first, with a picker listing both
    page = browser.get("/jobs/queues/").content.decode()
    assert "only-on-default" in page and "imports" not in page.split("<main>")[1]
    assert '<select name="shard" aria-label="Redis shard"><option value="default" selected>' in page
    # ?shard=bulk shows bulk, and is remembered for the next pages
    assert "imports" in browser.get("/jobs/queues/?shard=bulk").content.decode().split("<main>")[1]
    page = browser.get("/jobs/queues/").content.decode()
    assert "imports" in page.split("<main>")[1] and "only-on-default" not in page
    assert '<option value="bulk" selected>' in page
    # an unknown shard is a 400 naming the known ones
    response = browser.get("/jobs/queues/?shard=nope")
    assert response.status_code == 400 and b"default, bulk" in response.content
    # metrics: one scrape target per shard
    assert b'queue="imports"' in browser.get("/jobs/metrics?shard=bulk").content
    assert b'queue="imports"' not in browser.get("/jobs/metrics").content


def test_bad_shard_settings_are_reported_by_the_checks(settings, second_server):
    settings.JOBSAPP = {
        **settings.JOBSAPP,
        "SHARDS": {
            "a": {"REDIS_URL": second_server.url, "QUEUES": ["imports"], "COLOUR": "red"},
            "b": {"QUEUES": ["imports"]},
            "c": {"REDIS_CACHE_ALIAS": "no-such-cache"},
            "default": {"REDIS_URL": second_server.url},
        },
    }
    messages = [message.msg for message in checks.run_checks(tags=["jobsapp"]) if message.id == "jobsapp.E044"]
    assert any("unknown key(s) COLOUR" in message for message in messages)
    assert any("shard 'b' says nowhere where its Redis is" in message for message in messages)
    assert any("queue 'imports' is routed to two shards, 'a' and 'b'" in message for message in messages)
    assert any('"default" is the top-level connection settings' in message for message in messages)
    assert any("REDIS_CACHE_ALIAS 'no-such-cache' is not a cache in settings.CACHES" in message for message in messages)
    settings.JOBSAPP = {**settings.JOBSAPP, "SHARDS": {"a": {"REDIS_URL": second_server.url, "ENQUEUE_REPLICAS": "1"}}}
    assert [message.id for message in checks.run_checks(tags=["jobsapp"]) if message.id.startswith("jobsapp.E04")] == ["jobsapp.E042"]


def test_unknown_shard_names_raise(bulk):
    with pytest.raises(UnknownShard):
        connection.get_redis("nope")
    with pytest.raises(UnknownShard), shards.using("nope"):
        pass


def test_a_class_routed_to_a_shard_whose_workers_do_not_serve_its_queue_is_a_check_warning(bulk, settings, second_server):
    # Given HardWorker (queue "default") routed to shard "bulk", whose workers serve "imports"
    # When the checks run
    (warning,) = [message for message in checks.run_checks(tags=["jobsapp"]) if message.id == "jobsapp.W045"]
    # Then the warning names the class, the shard and the queue no worker of the shard serves
    assert "'HardWorker'" in warning.msg and "'bulk'" in warning.msg and "'default'" in warning.msg
    assert warning.level == checks.WARNING
    # and once the shard serves that queue too, the warning is gone
    settings.JOBSAPP = {
        **settings.JOBSAPP,
        "SHARDS": {"bulk": {"REDIS_URL": second_server.url, "QUEUES": ["imports", "default"], "CLASSES": ["HardWorker"]}},
    }
    assert not [message for message in checks.run_checks(tags=["jobsapp"]) if message.id == "jobsapp.W045"]
