"""A fleet of small processes, side by side with Sidekiq 6.4 (run by hand, not a test):
``.venv/bin/python -m bench.fleet --processes 1 20``.

For each size N and each shape, on one throwaway redis-server (flushed between shapes):

- ``sidekiq``: N ``sidekiq -c 1`` commands (OSS Sidekiq has no swarm);
- ``commands``: N ``runworkers -P 1 -c 1`` commands, each its own Python start-up;
- ``forked`` (N > 1): one ``runworkers -P N -c 1``, the children forked from a parent that has
  imported everything once (``gc.freeze()`` before the fork).

Measured, for each: seconds from spawning to every process registered in ``processes``; RSS and
PSS per process once idle (PSS shares a page among the processes mapping it; jobsapp's ``-P``
supervisor, which runs no job, is counted with the fleet); the fleet's idle Redis traffic over
``--idle-seconds`` (``INFO commandstats`` deltas: all commands per second and the scheduler's
share, ``ZRANGEBYSCORE`` on ``schedule`` and ``retry``, and jobsapp's orphan sweeps, one ``SCAN``
each); and, for jobsapp, the lateness of
scheduled jobs (start minus due time, p50 and p99) of ``--scheduled`` jobs due at random 0.1-3 s
after their push, pushed over a few seconds (short notice, so jobs that no poll saw in advance
are in it too: their lateness is the fleet's poll spacing).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import redis

from bench.side_by_side import PYCACHE, RUBY_DIR, memory_kib, percentile, python_environment, session_pids, setup_django, warm_bytecode
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ("sidekiq", "commands", "forked")
QUEUE = "scheduled"


def launch(shape: str, size: int, redis_url: str) -> list[subprocess.Popen[bytes]]:
    env = {**python_environment(bytecode=True), "REDIS_URL": redis_url, "BENCH_LOGGING": "quiet"}
    if shape == "sidekiq":
        command = ["sidekiq", "-r", str(RUBY_DIR / "jobs.rb"), "-c", "1", "-q", QUEUE, "-t", "5"]
        copies = size
    else:
        processes = 1 if shape == "commands" else size
        command = [sys.executable, str(ROOT / "manage.py"), "runworkers", "-P", str(processes), "-c", "1", "-q", QUEUE, "-t", "5"]
        copies = size if shape == "commands" else 1
    return [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(copies)
    ]


def stop(commands: list[subprocess.Popen[bytes]]) -> None:
    for command in commands:
        try:
            os.killpg(command.pid, 15)
        except ProcessLookupError:
            pass
    for command in commands:
        try:
            command.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(command.pid, 9)
            command.wait()


def commandstats(client: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in client.info("commandstats").items()}


def lateness(client: redis.Redis, count: int) -> tuple[float, float]:
    """p50 and p99 milliseconds of ``count`` LatenessProbe jobs due 0.1-3 s after their push."""
    from bench.jobs import LatenessProbe

    client.delete("bench:lateness")
    probe = LatenessProbe.set(queue=QUEUE)
    rng = random.Random(7)
    for _ in range(count):
        due = time.time() + rng.uniform(0.1, 3.0)
        probe.perform_at(due, due)
        time.sleep(rng.uniform(0.0, 0.05))
    deadline = time.monotonic() + 60
    while client.llen("bench:lateness") < count and time.monotonic() < deadline:
        time.sleep(0.1)
    samples = [float(value) * 1000 for value in client.lrange("bench:lateness", 0, -1)]
    return percentile(samples, 0.5), percentile(samples, 0.99)


def measure(shape: str, size: int, server: RedisServer, client: redis.Redis, options: argparse.Namespace) -> dict[str, str]:
    client.flushall()
    started = time.perf_counter()
    commands = launch(shape, size, server.url)
    try:
        deadline = time.monotonic() + 120
        while client.scard("processes") < size:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{shape}: {client.scard('processes')} of {size} processes registered")
            time.sleep(0.02)
        registered = time.perf_counter() - started
        time.sleep(options.settle_seconds)
        before = commandstats(client)
        time.sleep(options.idle_seconds)
        after = commandstats(client)
        calls = {name: after.get(name, 0) - before.get(name, 0) for name in after}
        for own in ("info", "scard", "config|resetstat"):  # the benchmark's own
            calls.pop(own, None)
        idle_per_second = sum(calls.values()) / options.idle_seconds
        polls_per_second = calls.get("zrangebyscore", 0) / options.idle_seconds
        rss, pss = [], []
        for command in commands:
            for pid in session_pids(command.pid):
                try:
                    one_rss, one_pss = memory_kib(pid)
                except (OSError, KeyError):
                    continue
                rss.append(one_rss)
                pss.append(one_pss)
        result = {
            "registered, s": f"{registered:.2f}",
            "RSS per process, MB": f"{statistics.mean(rss) / 1024:.1f}",
            "PSS per process, MB (supervisor included)": f"{sum(pss) / 1024 / size:.1f}",
            "idle Redis commands/s, whole fleet": f"{idle_per_second:.1f}",
            "idle schedule/retry polls (ZRANGEBYSCORE)/s": f"{polls_per_second:.2f}",
            "idle orphan sweeps (SCAN)/s": f"{calls.get('scan', 0) / options.idle_seconds:.2f}",
            "idle commands/s by name": ", ".join(
                f"{name} {count / options.idle_seconds:.1f}" for name, count in sorted(calls.items(), key=lambda item: -item[1]) if count
            ),
        }
        if shape != "sidekiq" and options.scheduled:
            p50, p99 = lateness(client, options.scheduled)
            result["scheduled lateness, p50 / p99 ms"] = f"{p50:.0f} / {p99:.0f}"
        return result
    finally:
        stop(commands)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 20])
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--settle-seconds", type=float, default=3.0, help="idle time after registration before measuring")
    parser.add_argument("--scheduled", type=int, default=200, help="scheduled jobs for the lateness measure (0: none)")
    options = parser.parse_args()
    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    setup_django()
    warm_bytecode()
    PYCACHE.mkdir(parents=True, exist_ok=True)
    client = redis.Redis.from_url(server.url)
    results: dict[tuple[str, int], dict[str, str]] = {}
    try:
        for size in options.processes:
            for shape in options.shapes:
                if shape == "forked" and size == 1:
                    continue
                print(f"{shape} x {size} (load {os.getloadavg()[0]:.2f})", flush=True)
                results[(shape, size)] = measure(shape, size, server, client, options)
    finally:
        server.stop()
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"load at the end {os.getloadavg()[0]:.2f}\n"
    )
    columns = list(results)
    print("| measure | " + " | ".join(f"{shape} x {size}" for shape, size in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    names = list(dict.fromkeys(name for result in results.values() for name in result))
    for name in names:
        print(f"| {name} | " + " | ".join(results[column].get(name, "") for column in columns) + " |")


if __name__ == "__main__":
    main()
