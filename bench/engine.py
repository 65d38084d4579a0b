"""Engine benchmark (run by hand, not a test): ``.venv/bin/python -m bench.engine``.

Starts its own throwaway redis-server and real ``runworkers`` processes, then prints:

- enqueue rate, one ``perform_async`` at a time and with ``perform_bulk`` (1,000 per round trip);
- drain rate of 20,000 no-op jobs with ``-P 2 -c 10`` and reliable fetch (jobs pushed while the
  queue is paused, the clock starts when it is resumed and stops when ``stat:processed`` says
  all ran);
- end-to-end latency (enqueue -> start) at a steady 200 jobs/s, p50 and p99;
- scheduled-job lateness (start - due time) of jobs scheduled 1-6 s ahead, p50 and p99;
- worker RSS per process after the drain (from the heartbeat's ``rss`` field).

Options: ``--jobs N`` (drain size), ``--rounds N`` (drain repetitions, best and median shown),
``--fetch basic`` to compare with Sidekiq's BRPOP fetch, ``--seconds N`` for the latency phase.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from tests.redis_server import RedisServer  # noqa: E402


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


class Workers:
    """``runworkers`` as a subprocess, ready once its processes have registered."""

    def __init__(self, redis_url: str, args: list[str], expected_processes: int) -> None:
        self.redis_url = redis_url
        self.args = args
        self.expected_processes = expected_processes
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Workers:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        client.delete("processes")
        env = {**os.environ, "REDIS_URL": self.redis_url, "DJANGO_SETTINGS_MODULE": "bench.settings", "LOG_LEVEL": "WARNING"}
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworkers", *self.args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while client.scard("processes") < self.expected_processes:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("workers did not start")
            time.sleep(0.05)
        time.sleep(0.3)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, 15)
            self.process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fetch", choices=["reliable", "basic"], default="reliable")
    parser.add_argument("--seconds", type=float, default=10.0)
    options = parser.parse_args()

    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    import django

    django.setup()
    from bench.jobs import LatencyProbe, LatenessProbe, NoopJob
    from jobsapp.connection import get_redis

    client = get_redis()
    results: list[tuple[str, str]] = []
    try:
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"Redis {client.info('server')['redis_version']}"
        )

        # --- enqueue ----------------------------------------------------------------------
        count = 20_000
        started = time.perf_counter()
        for index in range(count):
            NoopJob.perform_async(index)
        single = count / (time.perf_counter() - started)
        client.flushall()
        count = 200_000
        started = time.perf_counter()
        NoopJob.perform_bulk([[index] for index in range(count)])
        bulk = count / (time.perf_counter() - started)
        client.flushall()
        results += [("enqueue, one at a time", f"{single:,.0f} jobs/s"), ("enqueue, perform_bulk", f"{bulk:,.0f} jobs/s")]
        print(*results[-2:], sep="\n")

        # --- drain ------------------------------------------------------------------------
        rates = []
        rss_values: list[int] = []
        with Workers(server.url, ["-P", "2", "-c", "10", "-q", "default", "--fetch", options.fetch], 2):
            for _ in range(options.rounds):
                client.sadd("jobsapp:paused", "default")
                before = int(client.get("stat:processed") or 0)
                NoopJob.perform_bulk([[index] for index in range(options.jobs)])
                time.sleep(0.3)
                started = time.perf_counter()
                client.srem("jobsapp:paused", "default")
                while int(client.get("stat:processed") or 0) - before < options.jobs:
                    time.sleep(0.002)
                rates.append(options.jobs / (time.perf_counter() - started))
            time.sleep(5.5)  # one heartbeat, for RSS
            for identity in client.smembers("processes"):
                rss_values.append(int(client.hget(identity, "rss") or 0))
        results.append(
            (
                f"drain {options.jobs:,} no-op jobs, -P 2 -c 10, {options.fetch} fetch",
                f"best {max(rates):,.0f} jobs/s, median {statistics.median(rates):,.0f} jobs/s",
            )
        )
        results.append(("worker RSS after the drain", ", ".join(f"{value / 1024:.1f} MB" for value in sorted(rss_values))))
        print(*results[-2:], sep="\n")

        # --- latency at a steady 200 jobs/s, on one queue and with two more idle queues ------
        for queues in (["latency"], ["critical", "latency", "low"]):
            client.delete("bench:latency")
            queue_flags = [flag for name in queues for flag in ("-q", name)]
            with Workers(server.url, ["-P", "2", "-c", "10", *queue_flags, "--fetch", options.fetch], 2):
                total = int(200 * options.seconds)
                started = time.perf_counter()
                for index in range(total):
                    target = started + index / 200
                    delay = target - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    LatencyProbe.perform_async()
                deadline = time.monotonic() + 10
                while client.llen("bench:latency") < total and time.monotonic() < deadline:
                    time.sleep(0.05)
            samples = [float(value) * 1000 for value in client.lrange("bench:latency", 0, -1)]
            results.append(
                (
                    f"latency enqueue->start at 200 jobs/s, {len(queues)} queue(s)",
                    f"p50 {percentile(samples, 0.5):.2f} ms, p99 {percentile(samples, 0.99):.2f} ms ({len(samples)} jobs)",
                )
            )
            print(results[-1])

        # --- scheduled lateness ---------------------------------------------------------------
        import random

        rng = random.Random(7)
        client.delete("bench:lateness")
        with Workers(server.url, ["-P", "2", "-c", "10", "-q", "scheduled", "--fetch", options.fetch], 2):
            scheduled = 300
            base = time.time()
            for _ in range(scheduled):
                due = base + rng.uniform(1.0, 6.0)
                LatenessProbe.perform_at(due, due)
            deadline = time.monotonic() + 20
            while client.llen("bench:lateness") < scheduled and time.monotonic() < deadline:
                time.sleep(0.1)
        lateness = [float(value) * 1000 for value in client.lrange("bench:lateness", 0, -1)]
        results.append(
            (
                "scheduled-job lateness (jobs due 1-6 s ahead)",
                f"p50 {percentile(lateness, 0.5):.1f} ms, p99 {percentile(lateness, 0.99):.1f} ms, "
                f"earliest {min(lateness):.1f} ms ({len(lateness)} jobs)",
            )
        )
        print(results[-1])
    finally:
        server.stop()

    print("\n| measure | result |\n|---|---|")
    for name, value in results:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
