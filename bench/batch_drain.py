"""A job in a batch against the same job outside one (run by hand): ``.venv/bin/python -m bench.batch_drain``.

Starts its own redis-server and one ``runworkers -P 1 -c 10`` (``--workers`` changes it), then,
``--rounds`` times, alternating: pushes ``--jobs`` empty jobs (``bench.jobs.NoopJob``) with the
queue paused, plain or inside a ``Batch`` with an ``on_complete`` callback, resumes the queue and
times the drain until ``stat:processed`` has counted them all (and, for the batch, until its
``pending`` is 0: every job counted). Prints each drain's jobs/s and the batch/plain ratio of the
medians.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from bench.engine import Workers  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="-P 1 -c 10")
    options = parser.parse_args()

    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    import django

    django.setup()
    from bench.jobs import NoopJob
    from jobsapp import keys
    from jobsapp.batch import Batch
    from jobsapp.connection import get_redis

    client = get_redis()
    args = options.workers.split()
    processes = int(args[args.index("-P") + 1]) if "-P" in args else 1
    rates: dict[str, list[float]] = {"plain": [], "batch": []}
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; runworkers {options.workers}")
    try:
        with Workers(server.url, [*args, "-q", "default"], processes):
            for round_number in range(options.rounds):
                for kind in ("plain", "batch"):
                    client.sadd(keys.PAUSED, "default")
                    before = int(client.get(keys.STAT_PROCESSED) or 0)
                    arguments = [[index] for index in range(options.jobs)]
                    batch = None
                    if kind == "batch":
                        batch = Batch(on_complete=NoopJob, description="bench")
                        with batch.jobs():
                            NoopJob.perform_bulk(arguments)
                    else:
                        NoopJob.perform_bulk(arguments)
                    started = time.perf_counter()
                    client.srem(keys.PAUSED, "default")
                    while int(client.get(keys.STAT_PROCESSED) or 0) - before < options.jobs:
                        time.sleep(0.002)
                    if batch is not None:
                        while int(client.hget(keys.batch(batch.bid), "pending") or 0) > 0:
                            time.sleep(0.002)
                    elapsed = time.perf_counter() - started
                    rates[kind].append(options.jobs / elapsed)
                    print(f"round {round_number + 1}, {kind}: {options.jobs / elapsed:,.0f} jobs/s", flush=True)
                    while client.llen(keys.queue("default")):  # the callback, before the next round
                        time.sleep(0.01)
    finally:
        server.stop()
    plain, batch_rate = statistics.median(rates["plain"]), statistics.median(rates["batch"])
    print(f"\nmedian: plain {plain:,.0f} jobs/s, batch {batch_rate:,.0f} jobs/s: a batch job costs {plain / batch_rate:.2f}x")


if __name__ == "__main__":
    main()
