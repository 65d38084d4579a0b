"""One queue spread over the partitions of a real three-master Redis Cluster
(``JOBSAPP["CLUSTER_PARTITIONS"] = 3``): producers spread a queue's pushes over every partition,
each partition on its own master; a worker drains every partition; the jobs a killed worker
held in flight in each partition go back to that partition's queue; a failing job is filed in
partition 0's retry and dead sets, which the scheduler and the operators read; the operators
see one queue and where each partition lives; ``ENQUEUE_REPLICAS`` waits on the master each
push was written to.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import reverse

from jobsapp import api, client, keys
from jobsapp.checks import check_redis_mode
from jobsapp.connection import get_redis, master_name
from jobsapp.errors import ReplicationTimeout
from jobsapp.outcomes import DeadReason, OutcomeKind
from jobsapp.payload import decode
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.recovery import recover_list
from jobsapp.worker.retry import RetryPolicy
from tests.redis_cluster import RedisClusterServers
from tests.redis_server import RedisServer
from tests.testapp.jobs import RAN_KEY, ExplodeToDead, Nap, Record
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.slow

PARTITIONS = 3
WORKER_ENV = {"REDIS_CLUSTER": "1", "REDIS_CLUSTER_PARTITIONS": str(PARTITIONS)}


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers(masters=PARTITIONS).start()
    yield servers
    servers.stop()


@pytest.fixture
def partitioned(cluster, settings) -> RedisClusterServers:
    """The engine in cluster mode with three partitions on the module's cluster, emptied first."""
    cluster.flushall()
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": cluster.url, "REDIS_CLUSTER": True, "CLUSTER_PARTITIONS": PARTITIONS}
    return cluster


def per_partition(read) -> list[int]:
    """``read()`` evaluated with the key names of each partition in turn."""
    found = []
    for index in range(PARTITIONS):
        with keys.using_partition(index):
            found.append(read())
    return found


def queue_sizes(name: str = "default") -> list[int]:
    return per_partition(lambda: int(get_redis().llen(keys.queue(name))))


def test_a_queues_jobs_land_on_every_partition_each_on_its_own_master_and_are_all_drained(partitioned):
    # Given one queue's jobs pushed one by one and in bulk, in cluster mode with three partitions,
    # and three failing ones pushed one by one
    for value in range(30):
        Record.perform_async(f"single-{value}")
    client.push_bulk({"class": Record.wire_name(), "args": [[f"bulk-{value}"] for value in range(60)]})
    for _ in range(PARTITIONS):
        ExplodeToDead.perform_async()
    # Then every partition's list of the queue holds a third of them, each on another master
    assert queue_sizes() == [31, 31, 31]
    masters = per_partition(lambda: master_name(get_redis(), keys.queue("default")))
    assert len(set(masters)) == PARTITIONS
    # and the operators see one queue of 93 jobs
    assert [(queue.name, queue.size) for queue in api.Queue.summaries()] == [("default", 93)]
    assert api.Stats.fetch().enqueued == 93
    # When a worker with the same setting drains the queue
    with WorkerProcess(["-c", "4"], env=WORKER_ENV, redis_url=partitioned.url) as worker:
        redis = get_redis()
        wait_until(lambda: redis.llen(RAN_KEY) == 90, message=f"every job ran: {worker.output}")
        wait_until(lambda: api.DeadSet().size() == PARTITIONS, message=f"the failing jobs are dead: {worker.output}")
        wait_until(lambda: api.Stats.fetch().processed == 93, message=f"every job was counted: {worker.output}")
        identity = worker.identity
        # Then every partition's list is empty, and so is each of the worker's in-flight lists
        # (a failing job leaves its own just after it is filed in partition 0's dead set)
        assert queue_sizes() == [0, 0, 0]
        in_flight = lambda: per_partition(lambda: int(redis.llen(keys.inflight(identity))))  # noqa: E731
        wait_until(lambda: in_flight() == [0, 0, 0], message=f"none left in flight: {in_flight()}")
    ran = sorted(value.decode() for value in get_redis().lrange(RAN_KEY, 0, -1))
    assert ran == sorted([f"single-{value}" for value in range(30)] + [f"bulk-{value}" for value in range(60)])
    assert api.Stats.fetch().failed == PARTITIONS


def test_recovery_of_a_killed_worker_takes_back_its_jobs_from_every_partition(partitioned):
    # Given a worker running long jobs pushed to every partition, one thread for each, until
    # each partition has jobs in the worker's in-flight list there
    client.push_bulk({"class": Nap.wire_name(), "args": [[30] for _ in range(9)]})
    assert queue_sizes() == [3, 3, 3]
    worker = WorkerProcess(["-c", "9"], env=WORKER_ENV, redis_url=partitioned.url).start()
    identity = worker.identity
    redis = get_redis()
    try:
        wait_until(
            lambda: all(size > 0 for size in per_partition(lambda: int(redis.llen(keys.inflight(identity))))),
            message=f"jobs of every partition in flight: {worker.output}",
        )
    finally:
        # When the worker is killed with its jobs in flight
        worker.kill()
    held = per_partition(lambda: int(redis.llen(keys.inflight(identity))))
    waiting = queue_sizes()
    # and its in-flight lists are recovered
    requeued, buried = recover_list(redis, identity)
    # Then every job it held went back to its own partition's queue, nothing else moved
    assert (requeued, buried) == (sum(held), 0)
    assert queue_sizes() == [left + back for left, back in zip(waiting, held, strict=True)]
    assert queue_sizes() == [3, 3, 3]
    assert per_partition(lambda: int(redis.llen(keys.inflight(identity)))) == [0, 0, 0]


def test_operators_see_one_queue_pause_it_everywhere_and_where_each_partition_lives(partitioned, django_user_model):
    # Given one queue's jobs spread over the three partitions
    client.push_bulk({"class": Record.wire_name(), "args": [[value] for value in range(9)]})
    queue = api.Queue("default")
    # When an operator reads and pages the queue, then pauses it
    page = queue.page(1, per_page=4), queue.page(3, per_page=4)
    queue.pause()
    # Then it is one queue of 9 jobs, paged across the partitions, paused in every partition
    assert queue.size() == 9
    assert [(len(each.entries), each.total) for each in page] == [(4, 9), (1, 9)]
    assert len({record.jid for record in queue}) == 9
    assert per_partition(lambda: bool(get_redis().sismember(keys.PAUSED, "default"))) == [True, True, True]
    assert [(summary.name, summary.size, summary.paused) for summary in api.Queue.summaries()] == [("default", 9, True)]
    # and the CLI and the dashboard name each partition's master, three different ones
    found = api.partitions()
    assert [part.index for part in found] == [0, 1, 2]
    assert len({part.master for part in found}) == 3
    staff = django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    overview = browser.get(reverse("jobsapp:overview")).content.decode()
    assert all(part.master in overview and part.tag in overview for part in found)
    # When it is resumed and cleared, Then every partition's list is gone
    queue.resume()
    assert queue.clear() == 9
    assert queue_sizes() == [0, 0, 0]
    assert api.Queue.names() == []


@pytest.fixture(scope="module")
def replicated() -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers(masters=PARTITIONS, replicas_per_master=1).start()
    yield servers
    servers.stop()


def replica_of(cluster: RedisClusterServers, master_port: int) -> RedisServer:
    for node in cluster.nodes:
        role = node.client().execute_command("ROLE")
        if role[0] == b"slave" and int(role[2]) == master_port:
            return node
    raise AssertionError(f"no replica follows the master on port {master_port}")


def test_enqueue_replicas_waits_on_the_master_each_push_was_written_to(replicated, settings):
    # Given pushes that wait for one replica, on a cluster of three masters with one replica each
    replicated.flushall()
    settings.JOBSAPP = {
        **settings.JOBSAPP,
        "REDIS_URL": replicated.url,
        "REDIS_CLUSTER": True,
        "CLUSTER_PARTITIONS": PARTITIONS,
        "ENQUEUE_REPLICAS": 1,
        "ENQUEUE_REPLICAS_TIMEOUT_SECONDS": 0.3,
    }
    # When jobs are pushed one by one while every replica follows
    pushed = [Record.perform_async(value) for value in range(6)]
    # Then each push returned once its own master's replica had it
    assert all(pushed) and queue_sizes() == [2, 2, 2]
    # When partition 1's master's replica stops answering, and three more jobs are pushed
    master = per_partition(lambda: master_name(get_redis(), keys.queue("default")))[1]
    stalled = replica_of(replicated, int(master.rsplit(":", 1)[1]))
    refused: list[ReplicationTimeout] = []
    os.kill(stalled.process.pid, signal.SIGSTOP)
    try:
        for value in range(3):
            try:
                Record.perform_async(f"late-{value}")
            except ReplicationTimeout as exc:
                refused.append(exc)
    finally:
        os.kill(stalled.process.pid, signal.SIGCONT)
    # Then only the push written to that master timed out, saying which master it was: the
    # other two masters' WAIT counted their own replicas; every job is enqueued all the same
    assert len(refused) == 1
    assert master in str(refused[0]) and refused[0].replicas_acknowledged == 0
    assert queue_sizes() == [3, 3, 3]


def test_a_job_of_another_partition_is_filed_once_and_not_at_all_when_a_sweeper_took_it_back(partitioned):
    # Given a job in flight in partition 2 of a process, and a retry policy of that process
    identity = "host:1:feedfacecafe"
    raw = b'{"class":"tests.testapp.jobs.Record","args":["x"],"jid":"0123456789abcdef01234567","queue":"default"}'
    redis = get_redis()
    with keys.using_partition(2):
        redis.lpush(keys.inflight(identity), raw)
    policy = RetryPolicy(redis, keys.inflight(identity))
    unit = UnitOfWork(raw, "default", 2)
    # When it is filed in the dead set, and filed again (a sweeper took it back meanwhile)
    first = policy.bury(unit, decode(raw), RuntimeError("boom"), reason=DeadReason.MALFORMED)
    again = policy.bury(unit, decode(raw), RuntimeError("boom again"), reason=DeadReason.MALFORMED)
    # Then the first filing moved it from partition 2's in-flight list to partition 0's dead set,
    # and the second, finding it no longer in flight, left nothing behind
    assert (first.kind, again.kind) == (OutcomeKind.DEAD, OutcomeKind.LOST)
    assert [entry.jid for entry in api.DeadSet()] == ["0123456789abcdef01234567"]
    assert "boom again" not in api.DeadSet().find_job("0123456789abcdef01234567").raw.decode()
    assert per_partition(lambda: int(redis.llen(keys.inflight(identity)))) == [0, 0, 0]


def test_check_warns_when_the_partitions_do_not_land_one_per_master(partitioned, settings):
    # Given the three-master cluster, first with one partition per master, then with one in all
    def warnings() -> list[str]:
        return [message.msg for message in check_redis_mode() if message.id == "jobsapp.W048"]

    spread = warnings()
    settings.JOBSAPP = {**settings.JOBSAPP, "CLUSTER_PARTITIONS": 1}
    single = warnings()
    settings.JOBSAPP = {**settings.JOBSAPP, "CLUSTER_PARTITIONS": 4}
    crowded = warnings()
    # Then only the settings that leave a master out, or crowd one, are warned about
    assert spread == []
    assert len(single) == 1 and "leaves 2 of the cluster's 3 masters without a partition" in single[0]
    assert len(crowded) == 1 and "more than one partition on a master" in crowded[0]
