"""A reshard under load: the slot holding every key of the engine migrates to another master,
key by key, while a worker drains a backlog. Clients meet ``ASK`` (a key already moved) and
``TRYAGAIN`` (a script whose keys are split between the two masters for a moment); redis-py
follows the first, the engine's Redis-error path retries the second. Asserted: every job runs
(lost 0), the worker keeps running, and afterwards every key of the engine is on the new master.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from redis.crc import key_slot

from jobsapp import connection, keys
from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import DONE, LedgerJob
from tests.redis_cluster import RedisClusterServers, migrate_slot
from tests.workers import wait_until

pytestmark = pytest.mark.slow

JOBS = 2_000
CONCURRENCY = 5
#: the queue spread over the three masters (JOBSAPP["CLUSTER_PARTITIONS"])
PARTITIONS = 3


@pytest.fixture
def cluster() -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers().start()
    yield servers
    servers.stop()


def test_the_engines_slot_migrates_while_a_worker_drains(cluster, settings, ledger, start_worker, measure):
    engine_settings = {"REDIS_URL": cluster.url, "REDIS_CLUSTER": True, "CLUSTER_PARTITIONS": PARTITIONS}
    settings.JOBSAPP = {**settings.JOBSAPP, **engine_settings}
    connection.reset()
    # Given a backlog on the cluster and a worker draining it
    expected = [f"sm-{index}" for index in range(JOBS)]
    for start in range(0, JOBS, 1000):
        LedgerJob.perform_bulk([[ledger_id, 1] for ledger_id in expected[start : start + 1000]])
    worker = start_worker(
        ["-c", str(CONCURRENCY), "-t", "5"],
        overrides={**engine_settings, **FAST_LIVENESS},
        env={"REDIS_CLUSTER": "1"},
        redis_url=cluster.url,
    )
    wait_until(lambda: ledger.hlen(DONE) >= JOBS // 5, timeout_seconds=60, message=f"work under way: {worker.output[-2000:]}")

    # When the engine's slot migrates to another master, key by key, mid-drain
    slot = key_slot(keys.partition_tag(0, 1).encode())
    source_port = cluster.client().get_node_from_key(keys.QUEUES).port
    target = next(node for node in cluster.master_nodes() if node.port != source_port)
    started = time.monotonic()
    moved = migrate_slot(cluster, slot, target, keys_per_call=1)
    migration_seconds = time.monotonic() - started

    # Then every job runs, none lost, and the worker is still running
    wait_until(
        lambda: ledger.hlen(DONE) >= JOBS, timeout_seconds=120, interval_seconds=0.5, message=f"every job ran: {worker.output[-3000:]}"
    )
    finished = ledger.hgetall(DONE)
    lost = [ledger_id for ledger_id in expected if ledger_id.encode() not in finished]
    duplicates = sum(int(count) - 1 for count in finished.values() if int(count) > 1)
    assert worker.process is not None and worker.process.poll() is None, "the worker died during the migration"
    worker.stop()
    # ... and the engine's keys are all on the new master now
    assert target.client().dbsize() > 0
    source = next(node for node in cluster.nodes if node.port == source_port)
    assert not [key for key in source.client().scan_iter(count=1000) if key.startswith(b"{")]
    measure(
        "cluster slot migration", jobs=JOBS, keys_moved=moved, migration_seconds=migration_seconds, lost=len(lost), duplicates=duplicates
    )
    assert lost == []
