"""The cost of ``ENQUEUE_REPLICAS`` (run by hand, not a test): ``.venv/bin/python -m bench.replicas``.

Starts a throwaway master and one replica on loopback, then times pushes with
``ENQUEUE_REPLICAS`` 0 (the default: the push returns when the master has it) and 1 (the push's
pipeline ends with ``WAIT 1``: it returns once the replica has it):

- ``perform_async`` one at a time: jobs/s and per-push latency p50/p99;
- ``perform_bulk`` of 100,000 jobs (1,000 per round trip, one WAIT per round trip).

On loopback the replica answers within one event-loop turn, so this is the floor of the cost;
across hosts add one network round trip per push (per batch for bulk).
Options: ``--jobs N`` single pushes per setting (default 5,000).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from bench.engine import percentile  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5_000)
    options = parser.parse_args()

    master = RedisServer(extra_args=["--repl-diskless-sync-delay", "0"]).start()
    replica = RedisServer(extra_args=["--replicaof", "127.0.0.1", str(master.port)]).start()
    os.environ["REDIS_URL"] = master.url
    import django

    django.setup()
    from django.conf import settings

    from bench.jobs import NoopJob
    from jobsapp import connection

    try:
        while master.client().info("replication").get("connected_slaves", 0) < 1:
            time.sleep(0.05)
        print(f"{'ENQUEUE_REPLICAS':>16}  {'one at a time':>14}  {'p50 ms':>7}  {'p99 ms':>7}  {'perform_bulk':>14}")
        for replicas in (0, 1):
            settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": master.url, "ENQUEUE_REPLICAS": replicas}
            connection.reset()
            master.client().flushall()
            latencies = []
            started = time.perf_counter()
            for index in range(options.jobs):
                before = time.perf_counter()
                NoopJob.perform_async(index)
                latencies.append((time.perf_counter() - before) * 1000)
            single = options.jobs / (time.perf_counter() - started)
            master.client().flushall()
            count = 100_000
            started = time.perf_counter()
            NoopJob.perform_bulk([[index] for index in range(count)], batch_size=1000)
            bulk = count / (time.perf_counter() - started)
            assert replica.client().llen("queue:default") == count or not replicas
            print(
                f"{replicas:>16}  {single:>9,.0f} /s  {percentile(latencies, 0.5):>7.3f}  "
                f"{percentile(latencies, 0.99):>7.3f}  {bulk:>11,.0f} /s"
            )
    finally:
        replica.stop()
        master.stop()


if __name__ == "__main__":
    main()
