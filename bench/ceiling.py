"""The ceiling of one Redis with this engine (run by hand, not a test): ``.venv/bin/python -m bench.ceiling``.

Redis runs commands on one thread, so one Redis can move only so many jobs per second however
many workers you add; past that point the answer is more Redis servers (``JOBSAPP["SHARDS"]``).
This script finds where that point is. It starts its own redis-server, then for each fleet
(``--fleets``: a list of ``commands x processes x threads``; each ``runworkers`` command stands
for one host) it drains ``--jobs`` no-op jobs with reliable fetch and reads Redis's own CPU
counters (``INFO cpu``, main thread) before and after. It prints:

- jobs/s the fleet drained, and how busy Redis's main thread was meanwhile (CPU seconds per
  wall second: 100 % is saturated);
- Redis CPU per job (µs: fetch + ack + stats + heartbeats, everything the engine costs Redis);
- the ceiling: 1,000,000 / (µs per job) jobs/s, the rate at which Redis's thread would be 100 %
  busy. It holds while the per-job cost stays flat as the fleet grows, which the table shows.

On a small machine the workers (Python) run out of CPU long before Redis does, so the measured
rate is not the ceiling; the CPU per job is what carries over to a bigger fleet on other hosts.
So a second table drives Redis to saturation directly: ``--drivers "1,2,3"`` processes each run
the engine's own reliable fetch and ack (``ReliableFetch.take`` of 20, ``acknowledge`` of those
20, the same Lua scripts a worker runs) with no job code, no threads and no heartbeats in
between, as fast as they can.
Options: ``--jobs N`` (default 30,000), ``--fleets "1x1x10,1x2x10,2x2x10"``, ``--drivers "1,2,3"``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from bench.engine import Workers  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402


def redis_cpu_seconds(client) -> float:
    """CPU seconds Redis's main thread has used (what saturates first; I/O threads are off)."""
    info = client.info("cpu")
    if "used_cpu_user_main_thread" in info:
        return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--fleets", default="1x1x10,1x2x10,2x2x10")
    parser.add_argument("--drivers", default="1,2,3")
    options = parser.parse_args()

    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    import django

    django.setup()
    from bench.jobs import NoopJob
    from jobsapp.connection import get_redis

    client = get_redis()
    rows = []
    direct_rows: list[tuple[int, float, float, float]] = []
    try:
        print(f"{os.cpu_count()} cores; Redis {client.info('server')['redis_version']}; {options.jobs:,} no-op jobs per fleet")
        print(f"{'fleet (hosts x -P x -c)':>24}  {'jobs/s':>8}  {'Redis busy':>10}  {'Redis µs/job':>12}  {'ceiling jobs/s':>14}")
        for fleet in options.fleets.split(","):
            commands, processes, threads = (int(part) for part in fleet.split("x"))
            client.flushall()
            client.sadd("jobsapp:paused", "default")
            NoopJob.perform_bulk([[index] for index in range(options.jobs)])
            fleet_workers = [
                Workers(server.url, ["-P", str(processes), "-c", str(threads), "-q", "default"], processes) for _ in range(commands)
            ]
            for workers in fleet_workers:
                workers.__enter__()
            try:
                time.sleep(0.5)
                cpu_before = redis_cpu_seconds(client)
                started = time.perf_counter()
                client.srem("jobsapp:paused", "default")
                while int(client.get("stat:processed") or 0) < options.jobs:
                    time.sleep(0.005)
                wall = time.perf_counter() - started
                cpu = redis_cpu_seconds(client) - cpu_before
            finally:
                for workers in fleet_workers:
                    workers.__exit__(None, None, None)
            rate = options.jobs / wall
            microseconds_per_job = cpu / options.jobs * 1e6
            rows.append((fleet, rate, cpu / wall, microseconds_per_job, 1e6 / microseconds_per_job))
            print(f"{fleet:>24}  {rate:>8,.0f}  {cpu / wall:>9.0%}  {microseconds_per_job:>12.1f}  {1e6 / microseconds_per_job:>14,.0f}")
        print(f"\n{'fetch+ack drivers':>24}  {'jobs/s':>8}  {'Redis busy':>10}  {'Redis µs/job':>12}")
        for drivers in (int(count) for count in options.drivers.split(",") if count):
            client.flushall()
            NoopJob.perform_bulk([[index] for index in range(options.jobs)])
            context = multiprocessing.get_context("fork")
            processes = [context.Process(target=drive, args=(server.url, index)) for index in range(drivers)]
            cpu_before = redis_cpu_seconds(client)
            started = time.perf_counter()
            for process in processes:
                process.start()
            for process in processes:
                process.join()
            wall = time.perf_counter() - started
            cpu = redis_cpu_seconds(client) - cpu_before
            if int(client.get("stat:processed") or 0) != options.jobs:
                raise RuntimeError("the drivers did not acknowledge every job")
            rate = options.jobs / wall
            direct_rows.append((drivers, rate, cpu / wall, cpu / options.jobs * 1e6))
            print(f"{drivers:>24}  {rate:>8,.0f}  {cpu / wall:>9.0%}  {cpu / options.jobs * 1e6:>12.1f}")
    finally:
        server.stop()
    print(
        "\n| fleet (hosts x -P x -c) | drained jobs/s | Redis main thread busy | Redis CPU µs/job | ceiling jobs/s |\n|---|---|---|---|---|"
    )
    for fleet, rate, busy, per_job, ceiling in rows:
        print(f"| {fleet} | {rate:,.0f} | {busy:.0%} | {per_job:.1f} | {ceiling:,.0f} |")

    print("\n| fetch+ack drivers (no job code) | jobs/s | Redis main thread busy | Redis CPU µs/job |\n|---|---|---|---|")
    for drivers, rate, busy, per_job in direct_rows:
        print(f"| {drivers} | {rate:,.0f} | {busy:.0%} | {per_job:.1f} |")


def drive(redis_url: str, index: int) -> None:
    """One saturating driver: the engine's fetch and ack, back to back, until the queue is empty."""
    import datetime as dt
    import random

    import redis

    from jobsapp.worker.fetch import QueueOrder, ReliableFetch

    client = redis.Redis.from_url(redis_url)
    fetch = ReliableFetch(
        f"bench:driver:{index}",
        QueueOrder.parse(["default"]),
        client=client,
        blocking_client=client,
        rng=random.Random(index),
        make_blocking_client=lambda: client,
    )
    today = dt.datetime.now(dt.UTC).date()
    while True:
        units = fetch.take(20, block_seconds=0)
        if not units:
            return
        jids = [json.loads(unit.raw)["jid"] for unit in units]
        fetch.acknowledge(units, jids, processed=len(units), failed=0, today=today)


if __name__ == "__main__":
    main()
