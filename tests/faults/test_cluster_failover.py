"""Redis Cluster failover under load: the master holding the engine's slot is SIGKILLed while a
worker drains a backlog; the cluster promotes its replica; the worker must follow it.

A real three-master, three-replica cluster on loopback (``cluster-node-timeout`` 2 s: a replica is
promoted within a few seconds). The worker knows one node's address, as a managed service's
configuration endpoint gives. What is asserted:

- every acknowledged push runs (they were pushed, and so replicated, before the kill): lost 0;
- the worker keeps running and takes jobs again within seconds of the promotion; the queue is
  spread over three partitions (one per master), and the killed master held partition 0 (a third
  of the queue, and the engine's shared state): its part of the queue drains again too;
- duplicates (a job whose fetch or acknowledgement died with the master) are counted, and stay
  under what the worker can hold in flight at once.

The numbers go into the fault-scenario table printed at the end of the run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from redis.crc import key_slot

from jobsapp import connection, keys
from tests.faults.conftest import FAST_LIVENESS, SOAK
from tests.faults.jobs import DONE, LedgerJob
from tests.redis_cluster import RedisClusterServers
from tests.redis_server import RedisServer
from tests.workers import wait_until

pytestmark = pytest.mark.slow

JOBS = 10_000 if SOAK else 2_000
CONCURRENCY = 5
#: the queue spread over the three masters (JOBSAPP["CLUSTER_PARTITIONS"])
PARTITIONS = 3
FETCH_BATCH_SIZE = 20


@pytest.fixture
def cluster() -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers(replicas_per_master=1).start()
    yield servers
    servers.stop()


def master_of_the_engine(cluster: RedisClusterServers) -> RedisServer:
    """The master serving the slot of the engine's hash tag now."""
    slot_owner = cluster.client().get_node_from_key(keys.partition_tag(0, 1).join("{}"))
    return next(node for node in cluster.nodes if node.port == slot_owner.port)


def test_the_engines_master_killed_while_a_worker_drains(cluster, settings, ledger, start_worker, measure):
    engine_settings = {"REDIS_URL": cluster.url, "REDIS_CLUSTER": True, "CLUSTER_PARTITIONS": PARTITIONS}
    settings.JOBSAPP = {**settings.JOBSAPP, **engine_settings}
    connection.reset()
    # Given a backlog pushed to the cluster (each push acknowledged) and a worker draining it
    expected = [f"cf-{index}" for index in range(JOBS)]
    for start in range(0, JOBS, 1000):
        LedgerJob.perform_bulk([[ledger_id, 2] for ledger_id in expected[start : start + 1000]])
    master = master_of_the_engine(cluster)
    worker = start_worker(
        ["-c", str(CONCURRENCY), "-t", "5"],
        overrides={**engine_settings, **FAST_LIVENESS, "FETCH_BATCH_SIZE": FETCH_BATCH_SIZE},
        env={"REDIS_CLUSTER": "1"},
        redis_url=cluster.url,
    )
    wait_until(lambda: ledger.hlen(DONE) >= JOBS // 5, timeout_seconds=60, message=f"work under way: {worker.output[-2000:]}")

    # When the master holding the engine's slot is SIGKILLed
    done_before = ledger.hlen(DONE)
    killed_at = time.monotonic()
    master.kill()
    wait_until(lambda: master_of_the_engine_or_none(cluster, master) is not None, timeout_seconds=30, message="a replica promoted")
    promoted_seconds = time.monotonic() - killed_at

    # Then the worker takes jobs again within seconds of the promotion, from partition 0 too
    wait_until(
        lambda: ledger.hlen(DONE) > done_before + CONCURRENCY * 2, timeout_seconds=30, message=f"jobs ran again: {worker.output[-3000:]}"
    )
    resumed_seconds = time.monotonic() - killed_at
    waiting = home_queue_size()
    wait_until(
        lambda: home_queue_size() < waiting or waiting == 0, timeout_seconds=30, message=f"partition 0 drains: {worker.output[-3000:]}"
    )
    home_resumed_seconds = time.monotonic() - killed_at

    # ... and every acknowledged push runs: none lost
    def done() -> dict[bytes, bytes]:
        return ledger.hgetall(DONE)

    wait_until(lambda: len(done()) >= JOBS, timeout_seconds=120, interval_seconds=0.5, message=f"every job ran: {worker.output[-3000:]}")
    finished = done()
    lost = [ledger_id for ledger_id in expected if ledger_id.encode() not in finished]
    duplicates = sum(int(count) - 1 for count in finished.values() if int(count) > 1)
    assert worker.process is not None and worker.process.poll() is None, "the worker died with the master"
    worker.stop()
    measure(
        "cluster failover",
        jobs=JOBS,
        lost=len(lost),
        duplicates=duplicates,
        promoted_seconds=promoted_seconds,
        resumed_seconds=resumed_seconds,
        partition_0_resumed_seconds=home_resumed_seconds,
    )
    assert lost == []
    assert duplicates <= CONCURRENCY + FETCH_BATCH_SIZE + 1


def home_queue_size() -> int:
    """The jobs waiting in partition 0's list of the queue (read through a client of its own, so
    it follows the promotion); a large number while the cluster does not answer."""
    try:
        return int(connection.new_redis().llen(keys.queue("default")))
    except (redis.RedisError, OSError):
        return 1 << 30


def master_of_the_engine_or_none(cluster: RedisClusterServers, killed: RedisServer) -> RedisServer | None:
    """The new master of the engine's slot, once the cluster says one other than ``killed`` has it."""
    for node in cluster.nodes:
        if node is killed or node.process is None or node.process.poll() is not None:
            continue
        try:
            slots = node.client().execute_command("CLUSTER", "SLOTS")
        except (redis.RedisError, OSError):  # a node that does not answer now: ask the next one
            continue
        slot = key_slot(keys.partition_tag(0, 1).encode())
        for low, high, owner, *_ in slots:
            if int(low) <= slot <= int(high) and int(owner[1]) != killed.port:
                return next((candidate for candidate in cluster.nodes if candidate.port == int(owner[1])), None)
    return None


@pytest.mark.skipif(not SOAK, reason="soak only (JOBSAPP_SOAK=1): a second failover scenario, run by hand")
def test_another_partitions_master_killed_the_others_keep_running(cluster, settings, ledger, start_worker, measure):
    engine_settings = {"REDIS_URL": cluster.url, "REDIS_CLUSTER": True, "CLUSTER_PARTITIONS": PARTITIONS}
    settings.JOBSAPP = {**settings.JOBSAPP, **engine_settings}
    connection.reset()
    # Given a backlog spread over the three partitions and a worker draining it
    expected = [f"cp-{index}" for index in range(JOBS)]
    for start in range(0, JOBS, 1000):
        LedgerJob.perform_bulk([[ledger_id, 2] for ledger_id in expected[start : start + 1000]])
    tag = "{" + keys.partition_tag(1, PARTITIONS) + "}"
    owner = cluster.client().get_node_from_key(tag)
    master = next(node for node in cluster.nodes if node.port == owner.port)
    worker = start_worker(
        ["-c", str(CONCURRENCY), "-t", "5"],
        overrides={**engine_settings, **FAST_LIVENESS, "FETCH_BATCH_SIZE": FETCH_BATCH_SIZE},
        env={"REDIS_CLUSTER": "1"},
        redis_url=cluster.url,
    )
    wait_until(lambda: ledger.hlen(DONE) >= JOBS // 5, timeout_seconds=60, message=f"work under way: {worker.output[-2000:]}")
    # When partition 1's master is SIGKILLed
    done_before = ledger.hlen(DONE)
    killed_at = time.monotonic()
    master.kill()
    slot = key_slot(keys.partition_tag(1, PARTITIONS).encode())

    def promoted() -> bool:
        for node in cluster.nodes:
            if node is master or node.process is None or node.process.poll() is not None:
                continue
            try:
                slots = node.client().execute_command("CLUSTER", "SLOTS")
            except (redis.RedisError, OSError):
                continue
            return any(int(low) <= slot <= int(high) and int(owner[1]) != master.port for low, high, owner, *_ in slots)
        return False

    wait_until(promoted, timeout_seconds=30, message="a replica promoted")
    promoted_seconds = time.monotonic() - killed_at
    done_while_down = ledger.hlen(DONE) - done_before
    # Then the other partitions' jobs kept running while it was replaced, and none is lost
    everything = f"every job ran: {worker.output[-3000:]}"
    wait_until(lambda: ledger.hlen(DONE) >= JOBS, timeout_seconds=120, interval_seconds=0.5, message=everything)
    finished = ledger.hgetall(DONE)
    lost = [ledger_id for ledger_id in expected if ledger_id.encode() not in finished]
    duplicates = sum(int(count) - 1 for count in finished.values() if int(count) > 1)
    assert worker.process is not None and worker.process.poll() is None, "the worker died with the master"
    worker.stop()
    measure(
        "cluster failover of partition 1",
        jobs=JOBS,
        lost=len(lost),
        duplicates=duplicates,
        promoted_seconds=promoted_seconds,
        jobs_done_before_the_promotion=done_while_down,
    )
    assert lost == []
    assert done_while_down > CONCURRENCY * 2
    assert duplicates <= 2 * (CONCURRENCY + FETCH_BATCH_SIZE) + 1
