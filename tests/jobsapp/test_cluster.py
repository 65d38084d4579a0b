"""Cluster mode on a real three-master Redis Cluster started for this module: a worker takes and
runs jobs, retries and dead jobs stay in one slot, nothing of the engine's lands outside its hash
tag, and ``check`` tells a cluster given as a plain URL (or the reverse) and an evicting master.

The rest of the suite runs on a cluster too with ``JOBSAPP_TEST_REDIS_CLUSTER=1`` (.ci/run).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from redis.crc import key_slot

from jobsapp import api, client, keys
from jobsapp.checks import check_cluster_settings, check_redis_mode
from jobsapp.connection import get_redis
from tests.redis_cluster import RedisClusterServers
from tests.testapp.jobs import RAN_KEY, ExplodeToDead, Record
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers().start()
    yield servers
    servers.stop()


@pytest.fixture
def on_cluster(cluster, settings) -> RedisClusterServers:
    """The engine in cluster mode on the module's cluster, emptied first."""
    cluster.flushall()
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": cluster.url, "REDIS_CLUSTER": True}
    return cluster


def engine_keys(cluster: RedisClusterServers) -> list[bytes]:
    """Every key on every master, but the test jobs' own."""
    found: list[bytes] = []
    for node in cluster.master_nodes():
        found += [key for key in node.client().scan_iter(count=1000) if not key.startswith(b"test:")]
    return found


def test_a_worker_runs_pushed_jobs_and_files_a_dead_one_on_a_cluster(on_cluster):
    # Given jobs pushed in cluster mode: three to run, one that goes straight to the dead set
    for value in ("a", "b", "c"):
        Record.perform_async(value)
    ExplodeToDead.perform_async()
    # When a worker in cluster mode runs them
    environment = {"REDIS_CLUSTER": "1"}
    with WorkerProcess(["-c", "2"], env=environment, redis_url=on_cluster.url) as worker:
        cluster_client = get_redis()
        wait_until(lambda: cluster_client.llen(RAN_KEY) == 3, message=f"three jobs ran: {worker.output}")
        wait_until(lambda: api.DeadSet().size() == 1, message=f"the failing job is dead: {worker.output}")
    # Then each ran once, the counters say so, and the process left its in-flight list empty
    assert sorted(cluster_client.lrange(RAN_KEY, 0, -1)) == [b"a", b"b", b"c"]
    assert api.Stats.fetch().processed == 4
    assert [json.loads(entry.raw)["class"] for entry in api.DeadSet()] == [ExplodeToDead.wire_name()]


def test_every_engine_key_lands_in_the_one_slot_of_its_hash_tag(on_cluster):
    # Given a push, a scheduled push and a worker that ran and registered itself
    Record.perform_async("x")
    Record.perform_in(600, "later")
    with WorkerProcess(["-c", "1"], env={"REDIS_CLUSTER": "1"}, redis_url=on_cluster.url) as worker:
        wait_until(lambda: get_redis().llen(RAN_KEY) == 1, message=worker.output)
        found = engine_keys(on_cluster)
    # Then every key of the engine carries partition 0's tag, so all share its slot
    tag = keys.partition_tag(0, 1)
    assert found
    assert {key_slot(key) for key in found} == {key_slot(tag.encode())}
    assert all(key.startswith(f"{{{tag}}}:".encode()) for key in found)


def test_pushes_refused_cross_slot_never_happen_in_bulk_or_scheduled(on_cluster):
    # Given a bulk push over two queues and a scheduled one
    jids = client.push_bulk({"class": Record.wire_name(), "args": [[1], [2], [3]], "queue": "one"})
    client.push({"class": Record.wire_name(), "args": [4], "queue": "two", "at": 2_000_000_000})
    # Then the queues and the schedule show them, read through the operators' API
    assert len(jids) == 3
    assert {queue.name: queue.size() for queue in api.Queue.all()} == {"one": 3}
    assert api.ScheduledSet().size() == 1


def test_queue_summaries_count_prioritised_jobs_on_a_cluster(on_cluster):
    # Given a queue holding one plain job and two prioritised ones, on a cluster
    Record.set(queue="urgent").perform_async("plain")
    Record.set(queue="urgent", priority=5).perform_async("five")
    Record.set(queue="urgent", priority=-5).perform_async("minus-five")
    # When the summaries and the stats are read (one pipeline over keys of one hash tag)
    # Then the queue's size counts all three
    assert [(queue.name, queue.size) for queue in api.Queue.summaries()] == [("urgent", 3)]
    assert api.Stats.fetch().enqueued == 3


def test_check_says_a_cluster_given_as_a_plain_url_needs_cluster_mode(cluster, settings):
    # Given REDIS_URL naming a cluster node without REDIS_CLUSTER
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": cluster.url, "REDIS_CLUSTER": False}
    # When the checks that ask Redis run
    found = {message.id: message.msg + " | " + (message.hint or "") for message in check_redis_mode()}
    # Then E047 says the server is a cluster node and how to say so
    assert "jobsapp.E047" in found
    assert "cluster_enabled:1" in found["jobsapp.E047"]
    assert "REDIS_CLUSTER'] = True" in found["jobsapp.E047"]


def test_check_says_cluster_mode_on_a_plain_server_is_wrong(redis_server, settings):
    # Given REDIS_CLUSTER on while REDIS_URL names a standalone server
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": redis_server.url, "REDIS_CLUSTER": True}
    if isinstance(redis_server, RedisClusterServers):
        pytest.skip("the suite's server is a cluster here")
    # When the checks that ask Redis run, Then E047 says it is not a cluster node
    found = {message.id: message.msg for message in check_redis_mode()}
    assert "not a cluster node" in found.get("jobsapp.E047", "")


def test_check_says_which_master_may_evict_jobs(on_cluster):
    # Given one master of the cluster set to evict keys under memory pressure
    evicting = on_cluster.master_nodes()[1]
    evicting.client().config_set("maxmemory-policy", "allkeys-lru")
    try:
        # When the checks that ask Redis run
        found = [message for message in check_redis_mode() if message.id == "jobsapp.E048"]
    finally:
        evicting.client().config_set("maxmemory-policy", "noeviction")
    # Then E048 names that master, and only it
    assert len(found) == 1
    assert f":{evicting.port}" in found[0].msg and "allkeys-lru" in found[0].msg


def test_check_refuses_a_cache_alias_or_sentinels_with_cluster_mode(settings):
    # Given cluster mode with a django-redis alias, then with Sentinels
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_CLUSTER": True, "REDIS_CACHE_ALIAS": "default"}
    with_alias = [message for message in check_cluster_settings() if message.id == "jobsapp.E046"]
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_CACHE_ALIAS": None, "SENTINELS": [["127.0.0.1", 26379]], "SENTINEL_SERVICE": "m"}
    with_sentinels = [message for message in check_cluster_settings() if message.id == "jobsapp.E046"]
    # Then each is E046 with a hint to give REDIS_URL instead
    assert len(with_alias) == 1 and "django-redis has no Redis Cluster client" in with_alias[0].msg
    assert len(with_sentinels) == 1 and "REDIS_URL" in (with_sentinels[0].hint or "")


def test_check_warns_that_ruby_sidekiq_cannot_share_a_cluster(settings):
    # Given cluster mode and a job class named as a Ruby worker (HardWorker, in the test app)
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_CLUSTER": True}
    # When the checks run, Then W046 says Ruby Sidekiq cannot run there
    found = [message for message in check_cluster_settings() if message.id == "jobsapp.W046"]
    assert len(found) == 1 and "HardWorker" in found[0].msg
    # And without cluster mode nothing is said
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_CLUSTER": False}
    assert [message for message in check_cluster_settings() if message.id == "jobsapp.W046"] == []


def test_check_accepts_enqueue_replicas_in_cluster_mode(settings):
    # Given cluster mode with pushes that wait for replicas (WAIT goes to the master written)
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_CLUSTER": True, "ENQUEUE_REPLICAS": 1}
    # When the checks run, Then none refuses it
    assert [message for message in check_cluster_settings() if message.id == "jobsapp.E046"] == []


def test_the_cli_names_the_master_of_each_partition(on_cluster):
    # Given the engine on a three-master cluster
    from io import StringIO

    from django.core.management import call_command

    # When `jobs cluster` is asked, as JSON and as a table
    as_json, as_table = StringIO(), StringIO()
    call_command("jobs", "cluster", "--json", stdout=as_json)
    call_command("jobs", "cluster", stdout=as_table)
    # Then it names the partition's tag, its slot and the master serving that slot now
    owner = on_cluster.client().get_node_from_key(keys.QUEUES)
    tag = keys.partition_tag(0, 1)
    assert json.loads(as_json.getvalue()) == [
        {"partition": 0, "tag": tag, "slot": key_slot(tag.encode()), "master": f"127.0.0.1:{owner.port}"}
    ]
    assert f"127.0.0.1:{owner.port}" in as_table.getvalue()


def test_the_cli_says_a_standalone_redis_has_no_partitions(redis_server):
    if isinstance(redis_server, RedisClusterServers):
        pytest.skip("the suite's server is a cluster here")
    from io import StringIO

    from django.core.management import call_command

    # Given a standalone Redis, When `jobs cluster` is asked, Then it says there is none
    out = StringIO()
    call_command("jobs", "cluster", stdout=out)
    assert "not a Redis Cluster" in out.getvalue()
