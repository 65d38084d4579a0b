"""Most masters of the cluster down at once: two of three masters (the engine's among them) are
frozen (SIGSTOP) for longer than ``cluster-node-timeout`` while a worker drains, so the cluster
state is ``fail`` and every node answers ``CLUSTERDOWN``; then they are thawed. The worker must
wait through it as through a Redis outage and resume, losing nothing.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from jobsapp import connection, keys
from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import DONE, LedgerJob
from tests.redis_cluster import NODE_TIMEOUT_MILLISECONDS, RedisClusterServers
from tests.workers import wait_until

pytestmark = pytest.mark.slow

JOBS = 2_000
CONCURRENCY = 5
#: the queue spread over the three masters (JOBSAPP["CLUSTER_PARTITIONS"])
PARTITIONS = 3
#: Frozen for three node timeouts: long enough for the cluster to declare the failure.
FROZEN_SECONDS = 3 * NODE_TIMEOUT_MILLISECONDS / 1000


@pytest.fixture
def cluster() -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers().start()
    yield servers
    servers.stop()


def test_two_of_three_masters_down_then_back_while_a_worker_drains(cluster, settings, ledger, start_worker, measure):
    engine_settings = {"REDIS_URL": cluster.url, "REDIS_CLUSTER": True, "CLUSTER_PARTITIONS": PARTITIONS}
    settings.JOBSAPP = {**settings.JOBSAPP, **engine_settings}
    connection.reset()
    # Given a backlog on the cluster and a worker draining it
    expected = [f"md-{index}" for index in range(JOBS)]
    for start in range(0, JOBS, 1000):
        LedgerJob.perform_bulk([[ledger_id, 2] for ledger_id in expected[start : start + 1000]])
    worker = start_worker(
        ["-c", str(CONCURRENCY), "-t", "5"],
        overrides={**engine_settings, **FAST_LIVENESS},
        env={"REDIS_CLUSTER": "1"},
        redis_url=cluster.url,
    )
    wait_until(lambda: ledger.hlen(DONE) >= JOBS // 5, timeout_seconds=60, message=f"work under way: {worker.output[-2000:]}")

    # When two of the three masters, the engine's among them, freeze past the node timeout
    engine_port = cluster.client().get_node_from_key(keys.QUEUES).port
    frozen = sorted(cluster.master_nodes(), key=lambda node: node.port != engine_port)[:2]
    for node in frozen:
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGSTOP)
    time.sleep(FROZEN_SECONDS)
    awake = next(node for node in cluster.master_nodes_among_live() if node not in frozen)
    state_while_down = awake.client().cluster("info").get("cluster_state")
    done_while_down = ledger.hlen(DONE)
    for node in frozen:
        assert node.process is not None
        os.kill(node.process.pid, signal.SIGCONT)
    thawed_at = time.monotonic()

    # Then the worker resumes once the cluster is whole again, and every job runs: none lost
    wait_until(lambda: ledger.hlen(DONE) > done_while_down + CONCURRENCY, timeout_seconds=60, message=f"resumed: {worker.output[-3000:]}")
    resumed_seconds = time.monotonic() - thawed_at
    wait_until(
        lambda: ledger.hlen(DONE) >= JOBS, timeout_seconds=120, interval_seconds=0.5, message=f"every job ran: {worker.output[-3000:]}"
    )
    finished = ledger.hgetall(DONE)
    lost = [ledger_id for ledger_id in expected if ledger_id.encode() not in finished]
    duplicates = sum(int(count) - 1 for count in finished.values() if int(count) > 1)
    assert worker.process is not None and worker.process.poll() is None, "the worker died while the cluster was down"
    worker.stop()
    assert state_while_down == "fail"
    measure(
        "cluster majority down",
        jobs=JOBS,
        frozen_seconds=FROZEN_SECONDS,
        resumed_seconds=resumed_seconds,
        lost=len(lost),
        duplicates=duplicates,
    )
    assert lost == []
