"""Where the engine's commands land on a Redis Cluster (run by hand, not a test):
``.venv/bin/python -m bench.cluster_spread [--jobs 5000] [--masters 3] [--partitions 3] [--concurrency 10]``.

Starts its own throwaway cluster (tests/redis_cluster.py), pushes ``--jobs`` empty jobs to one
queue in cluster mode with ``CLUSTER_PARTITIONS = --partitions`` (default: one per master),
resets every master's ``INFO commandstats``, drains the queue with one worker process
(``runworkers -c --concurrency``), and prints each master's share of the commands it served
during the drain (the cluster's own bookkeeping, CLUSTER and INFO, left out) against a fair share
of 1/masters, and the busiest master's multiple of it. ``--partitions 1`` shows the layout with
every key behind one hash tag.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from tests.redis_cluster import RedisClusterServers  # noqa: E402

#: Commands a cluster client sends for itself, not for the engine.
HOUSEKEEPING = ("cmdstat_cluster", "cmdstat_info", "cmdstat_config", "cmdstat_command", "cmdstat_client", "cmdstat_ping", "cmdstat_hello")


def commands_served(info: dict[str, dict[str, int]]) -> int:
    return sum(int(stats["calls"]) for name, stats in info.items() if name.startswith("cmdstat_") and not name.startswith(HOUSEKEEPING))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--masters", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=None, help="CLUSTER_PARTITIONS (default: --masters)")
    parser.add_argument("--concurrency", type=int, default=10)
    options = parser.parse_args()
    partitions = options.partitions or options.masters

    cluster = RedisClusterServers(masters=options.masters).start()
    os.environ["REDIS_URL"] = cluster.url
    os.environ["REDIS_CLUSTER"] = "1"
    os.environ["REDIS_CLUSTER_PARTITIONS"] = str(partitions)
    import django

    django.setup()
    from jobsapp import api, client

    try:
        client.push_bulk({"class": "bench.jobs.NoopJob", "args": [[] for _ in range(options.jobs)], "queue": "default"})
        masters = cluster.master_nodes()
        for node in masters:
            node.client().config_resetstat()
        started = time.monotonic()
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "runworkers", "-c", str(options.concurrency), "-P", "1"],
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while api.Queue("default").size() or api.Stats.fetch().processed < options.jobs:
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        served = {f"127.0.0.1:{node.port}": commands_served(node.client().info("commandstats")) for node in masters}
        worker.terminate()
        worker.wait(timeout=60)
    finally:
        cluster.stop()
    total = sum(served.values()) or 1
    fair = 1 / len(served)
    print(
        f"{options.jobs} jobs of one queue in {partitions} partition(s) drained in {elapsed:.1f} s "
        f"by one worker process of {options.concurrency} threads"
    )
    for where, count in served.items():
        print(f"  master {where}: {count} commands, {count / total:.1%} of all (fair share {fair:.1%})")
    print(f"busiest master: {max(served.values()) / total / fair:.2f}x a fair share")


if __name__ == "__main__":
    main()
