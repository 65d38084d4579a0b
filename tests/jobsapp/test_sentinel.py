"""Redis Sentinel as the way to the master: JOBSAPP["SENTINELS"] or a django-redis Sentinel cache
alias, for the client, the workers (blocking connections included), the api and the CLI; and
ENQUEUE_REPLICAS. The failover under load is in tests/faults/test_sentinel_failover.py."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from collections.abc import Iterator

import pytest
import redis as redis_lib
from django.core.management import call_command

from jobsapp import api, client, connection
from jobsapp.errors import ReplicationTimeout
from tests.redis_sentinel import SERVICE, SentinelCluster
from tests.redis_server import free_port
from tests.security.test_redis_connection import make_certificates
from tests.testapp.jobs import RAN_KEY, Record
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[SentinelCluster]:
    deployment = SentinelCluster(replicas=1, sentinels=3, password="master-secret", sentinel_password="sentinel-secret").start()
    yield deployment
    deployment.stop()


@pytest.fixture
def master(cluster):
    assert cluster.master is not None
    client = cluster.master.client()
    client.flushall()
    return client


def sentinel_cache(cluster: SentinelCluster) -> dict:
    """A django-redis cache entry that finds the master through the Sentinels (its own docs' form)."""
    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://:{cluster.password}@{SERVICE}/0",
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.SentinelClient",
            "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
            "SENTINELS": [("127.0.0.1", sentinel.port) for sentinel in cluster.sentinels],
            "SENTINEL_KWARGS": {"password": cluster.sentinel_password},
        },
    }


def test_sentinel_settings_take_the_client_api_and_cli_to_the_master(cluster, master, settings):
    # Given the engine told only where the Sentinels are (REDIS_URL's host is not a server)
    settings.JOBSAPP = {**settings.JOBSAPP, **cluster.settings()}
    connection.reset()
    # When a job is pushed
    jid = Record.perform_async("via sentinel")
    # Then it is on the master the Sentinels name, and the api and the CLI read it there
    assert json.loads(master.lindex("queue:default", 0))["jid"] == jid
    assert api.Queue("default").size() == 1
    out = io.StringIO()
    call_command("jobs", "--json", "queues", stdout=out)
    assert [(queue["name"], queue["size"]) for queue in json.loads(out.getvalue())] == [("default", 1)]
    assert connection.describe().startswith(f"Sentinel service {SERVICE!r} via 127.0.0.1:")
    assert "master-secret" not in connection.describe()
    # ... and a blocking connection (a fetcher's) reaches the same master with its own pool
    blocking = connection.new_redis(blocking_timeout_seconds=2)
    assert blocking.connection_pool is not connection.get_redis().connection_pool
    assert blocking.blmove("queue:default", "moved", 1, "RIGHT", "LEFT") is not None
    assert master.llen("moved") == 1


def test_malformed_sentinel_settings_are_reported_by_the_checks(settings):
    from django.core import checks

    def check_settings():
        return checks.run_checks(tags=["jobsapp"])

    settings.JOBSAPP = {**settings.JOBSAPP, "SENTINELS": [["127.0.0.1", "26379"]], "SENTINEL_OPTIONS": [], "ENQUEUE_REPLICAS": -1}
    ids = {message.id for message in check_settings()}
    assert {"jobsapp.E040", "jobsapp.E041", "jobsapp.E042"} <= ids
    settings.JOBSAPP = {**settings.JOBSAPP, "SENTINELS": None, "SENTINEL_OPTIONS": {}, "ENQUEUE_REPLICAS": 0}
    assert not {message.id for message in check_settings()} & {"jobsapp.E040", "jobsapp.E041", "jobsapp.E042"}


def test_a_django_redis_sentinel_alias_serves_the_pool_and_blocking_clients(cluster, master, settings):
    # Given the engine on a django-redis cache whose client is SentinelClient
    settings.CACHES = {**settings.CACHES, "jobs-sentinel": sentinel_cache(cluster)}
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_CACHE_ALIAS": "jobs-sentinel"}
    connection.reset()
    # When a job is pushed and a blocking client is made (this used to fail: the pool was
    # rebuilt without the service name and the Sentinel manager)
    Record.perform_async("via alias")
    blocking = connection.new_redis(blocking_timeout_seconds=2)
    # Then both reach the master
    assert master.llen("queue:default") == 1
    assert blocking.blmove("queue:default", "moved", 1, "RIGHT", "LEFT") is not None
    assert blocking.connection_pool is not connection.get_redis().connection_pool


def test_worker_through_a_django_redis_sentinel_alias(cluster, master):
    # Given a job on the master
    assert cluster.master is not None
    master.lpush("queue:default", json.dumps({"class": "tests.testapp.jobs.Record", "args": ["alias worker"], "jid": "a" * 24}))
    env = {
        "JOBSAPP_TEST_SENTINEL_CACHE": json.dumps(sentinel_cache(cluster)),
        "JOBSAPP_TEST_OVERRIDES": json.dumps({"REDIS_CACHE_ALIAS": "jobs-sentinel"}),
    }
    # When a worker starts on the alias (it failed at start before)
    with WorkerProcess(["-c", "2"], env, redis_url=cluster.master.url) as worker:
        # Then it runs the job on the master
        wait_until(lambda: master.llen(RAN_KEY) == 1, message="the job ran through the Sentinel alias")
        assert "cache alias 'jobs-sentinel'" in worker.output


def test_worker_through_sentinel_settings(cluster, master):
    assert cluster.master is not None
    master.lpush("queue:default", json.dumps({"class": "tests.testapp.jobs.Record", "args": ["settings worker"], "jid": "b" * 24}))
    env = {"JOBSAPP_TEST_OVERRIDES": json.dumps(cluster.settings())}
    with WorkerProcess(["-c", "2"], env, redis_url=cluster.master.url) as worker:
        wait_until(lambda: master.llen(RAN_KEY) == 1, message="the job ran through the Sentinels")
        assert f"Sentinel service {SERVICE!r}" in worker.output


def test_enqueue_replicas_waits_for_the_replica(cluster, master, settings):
    # Given ENQUEUE_REPLICAS = 1 and one replica
    settings.JOBSAPP = {**settings.JOBSAPP, **cluster.settings(), "ENQUEUE_REPLICAS": 1}
    connection.reset()
    # When jobs are pushed, one by one and in bulk
    jid = Record.perform_async("replicated")
    Record.perform_bulk([["bulk"]] * 3)
    # Then the push returned only once the replica had them
    replica = next(server for server in cluster.servers if server is not cluster.master)
    assert replica.client().llen("queue:default") == 4
    assert json.loads(replica.client().lindex("queue:default", -1))["jid"] == jid


def test_enqueue_replicas_not_met_raises_replication_timeout(cluster, master, settings):
    # Given more replicas required than exist
    settings.JOBSAPP = {**settings.JOBSAPP, **cluster.settings(), "ENQUEUE_REPLICAS": 2, "ENQUEUE_REPLICAS_TIMEOUT_SECONDS": 0.2}
    connection.reset()
    connection_before = connection.get_redis().client_id()
    # When a job is pushed
    with pytest.raises(ReplicationTimeout, match=r"1 of the 2 replicas required by ENQUEUE_REPLICAS confirmed within 0.2 s") as raised:
        client.push({"class": "tests.testapp.jobs.Record", "args": ["under-replicated"]})
    # Then the error names the job, which is enqueued on the master all the same
    assert raised.value.replicas_acknowledged == 1 and raised.value.replicas_required == 2
    assert json.loads(master.lindex("queue:default", 0))["jid"] == raised.value.jids[0]
    # ... and the idle connections were dropped, so the next push asks Sentinel again where the
    # master is (after a partition, a master without replicas may be a demoted one)
    assert connection.get_redis().client_id() != connection_before


@pytest.fixture
def tls_sentinel(tmp_path) -> Iterator[dict]:
    """A TLS-only master and a TLS-only Sentinel watching it over TLS: the engine's settings."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a throwaway certificate")
    files = make_certificates(tmp_path)
    tls = ["--tls-cert-file", str(files["server.crt"]), "--tls-key-file", str(files["server.key"]),
           "--tls-ca-cert-file", str(files["ca.crt"]), "--tls-auth-clients", "no"]  # fmt: skip
    master_port, sentinel_port = free_port(), free_port()
    master = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(master_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path), "--logfile", str(tmp_path / "master.log"), *tls],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    config = tmp_path / "sentinel.conf"
    config.write_text(
        f"port 0\ntls-port {sentinel_port}\nbind 127.0.0.1\ndir {tmp_path}\nlogfile {tmp_path / 'sentinel.log'}\n"
        f"tls-cert-file {files['server.crt']}\ntls-key-file {files['server.key']}\ntls-ca-cert-file {files['ca.crt']}\n"
        f"tls-auth-clients no\ntls-replication yes\nsentinel monitor {SERVICE} 127.0.0.1 {master_port} 1\n"
    )
    sentinel = subprocess.Popen(["redis-server", str(config), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    certificate_options = {"ssl_ca_certs": str(files["ca.crt"]), "ssl_cert_reqs": "required"}
    sentinel_client = redis_lib.Redis(port=sentinel_port, ssl=True, socket_timeout=1, **certificate_options)
    master_url = f"rediss://127.0.0.1:{master_port}/0?ssl_ca_certs={files['ca.crt']}&ssl_cert_reqs=required"

    def ready() -> bool:
        try:
            return bool(redis_lib.Redis.from_url(master_url, socket_timeout=1).ping() and sentinel_client.sentinel_master(SERVICE))
        except (redis_lib.RedisError, OSError):
            return False

    try:
        try:
            wait_until(ready, timeout_seconds=10)
        except AssertionError:
            pytest.skip("this redis-server does not serve TLS in Sentinel mode")
        yield {
            "master_url": master_url,
            "settings": {
                "SENTINELS": [["127.0.0.1", sentinel_port]],
                "SENTINEL_SERVICE": SERVICE,
                "SENTINEL_OPTIONS": {"ssl": True, **certificate_options},
                "REDIS_URL": f"rediss://{SERVICE}/0?ssl_ca_certs={files['ca.crt']}&ssl_cert_reqs=required",
            },
        }
    finally:
        for process in (sentinel, master):
            process.kill()
            process.wait()


def test_sentinel_and_master_over_tls(tls_sentinel, settings):
    # Given a master and a Sentinel that both speak TLS only, the engine told TLS for both
    settings.JOBSAPP = {**settings.JOBSAPP, **tls_sentinel["settings"]}
    connection.reset()
    master = redis_lib.Redis.from_url(tls_sentinel["master_url"])
    # When a job is pushed, and a worker started with the same settings
    Record.perform_async("over tls")
    env = {"JOBSAPP_TEST_OVERRIDES": json.dumps(tls_sentinel["settings"])}
    with WorkerProcess(["-c", "2"], env, redis_url=tls_sentinel["master_url"]):
        # Then the worker found the master through the Sentinel and ran the job, all over TLS
        wait_until(lambda: master.llen(RAN_KEY) == 1, message="the job ran over TLS")
