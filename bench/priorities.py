"""Priorities within a queue (run by hand, not a test): ``.venv/bin/python -m bench.priorities``.

Two measures, each on its own throwaway redis-server:

- **latency behind a backlog** (``--backlog``, default 10,000): a worker ``-P 1 -c 2 -q prio`` is kept
  busy by a backlog of ``BusyJob`` of ``--run-ms`` each (default 50 ms), pushed at priority -10
  (and, as a second case, as plain jobs); after a second of that, a ``PriorityProbe`` of
  priority 50 is pushed and records push -> start. Repeated ``--probes`` times (default 20), one
  probe at a time, with the backlog topped up. Prints p50, p99, max and the first probe's (the
  one that may find jobs fetched ahead while the worker was learning how long they are) next to
  one job's run time, and the backlog's jobs/s meanwhile (2 threads / run time when the worker
  is busy), and the most jobs the worker's in-flight list held when a probe was pushed (its 2
  running jobs, those fetched ahead, and finished ones whose batched ack has not landed).
  Then the same worker idle (having seen a prioritised job): a probe of priority 50 and a plain
  one pushed in turn, each push -> start.
- **cost for plain jobs** (``--before DIR``: a source tree of the code without priorities, e.g.
  ``git archive <commit> | tar -x -C DIR``): in alternating rounds, this tree and DIR each drain
  ``--jobs`` plain no-op jobs (default 20,000) with ``runworkers -P 2 -c 10`` (jobs pushed while
  the queue is paused; the clock runs from the resume to ``stat:processed``), and each pushes
  20,000 plain jobs one ``perform_async`` at a time in a fresh process. Prints each round and the
  medians, so the noise of a shared machine falls on both alike.

Options: ``--skip-latency``, ``--skip-cost``, ``--rounds N`` (default 4).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from tests.redis_server import RedisServer  # noqa: E402

PUSH_SNIPPET = """
import os, sys, time
sys.path.insert(0, os.getcwd())
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
import django
django.setup()
from bench.jobs import NoopJob
for index in range(2000):
    NoopJob.perform_async(index)
count = 20000
started = time.perf_counter()
for index in range(count):
    NoopJob.perform_async(index)
print((time.perf_counter() - started) / count * 1e6)
"""


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


class Workers:
    """``runworkers`` of the source tree ``tree``, ready once its processes have registered."""

    def __init__(self, tree: Path, redis_url: str, args: list[str], expected_processes: int) -> None:
        self.tree = tree
        self.redis_url = redis_url
        self.args = args
        self.expected_processes = expected_processes
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Workers:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        client.delete("processes")
        env = {
            **os.environ,
            "REDIS_URL": self.redis_url,
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(self.tree),
        }
        self.process = subprocess.Popen(
            [sys.executable, str(self.tree / "manage.py"), "runworkers", *self.args],
            cwd=self.tree,
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


def latency(backlog: int, run_seconds: float, probes: int) -> None:
    from bench.jobs import BusyJob, PriorityProbe
    from jobsapp.connection import get_redis

    client = get_redis()
    for backlog_priority in (-10, 0):
        client.flushall()
        samples: list[float] = []
        with Workers(ROOT, os.environ["REDIS_URL"], ["-P", "1", "-c", "2", "-q", "prio"], 1):
            BusyJob.set(priority=backlog_priority).perform_bulk([[run_seconds]] * backlog)
            time.sleep(1.0)  # warm: the fetch's look-ahead has learned that the jobs are long
            started, processed_before = time.monotonic(), int(client.get("stat:processed") or 0)
            inflight = [f"jobsapp:inflight:{member.decode()}" for member in client.smembers("processes")]
            most_held = 0
            for _ in range(probes):
                waiting = client.llen("queue:prio") + client.zcard("jobsapp:pqueue:prio")
                if waiting < backlog:
                    BusyJob.set(priority=backlog_priority).perform_bulk([[run_seconds]] * (backlog - waiting))
                time.sleep(run_seconds * 3)  # the worker is busy with the backlog
                count = client.llen("bench:priority")
                most_held = max([most_held, *(client.llen(key) for key in inflight)])  # running, fetched ahead, not yet acked
                PriorityProbe.set(priority=50).perform_async(time.time())
                deadline = time.monotonic() + 30
                while client.llen("bench:priority") == count:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the probe did not run")
                    time.sleep(0.001)
            samples = [float(value) * 1000 for value in client.lrange("bench:priority", 0, -1)]
            busy_rate = (int(client.get("stat:processed") or 0) - processed_before) / (time.monotonic() - started)
        kind = "priority -10" if backlog_priority else "plain (priority 0)"
        print(
            f"| {backlog:,} jobs of {run_seconds * 1000:.0f} ms waiting, {kind}; -P 1 -c 2 | {len(samples)} | "
            f"{percentile(samples, 0.5):.1f} | {percentile(samples, 0.99):.1f} | {max(samples):.1f} | {samples[0]:.1f} | "
            f"{most_held} | {busy_rate:.0f} |"
        )


def idle(probes: int) -> None:
    """Push -> start on an idle worker that has seen prioritised jobs: a prioritised probe (woken
    through the wake list) against a plain one (woken by its BLMOVE), interleaved."""
    from bench.jobs import PriorityProbe
    from jobsapp.connection import get_redis

    client = get_redis()
    client.flushall()
    samples: dict[str, list[float]] = {"priority 50": [], "plain": []}
    with Workers(ROOT, os.environ["REDIS_URL"], ["-P", "1", "-c", "2", "-q", "prio"], 1):
        PriorityProbe.set(priority=50).perform_async(time.time())  # the process has seen priorities
        deadline = time.monotonic() + 10
        while not client.llen("bench:priority"):  # (at its next look: it had not seen one yet)
            if time.monotonic() > deadline:
                raise RuntimeError("the first probe did not run")
            time.sleep(0.01)
        time.sleep(0.5)
        for index in range(probes * 2):
            kind = "priority 50" if index % 2 == 0 else "plain"
            client.delete("bench:priority")
            time.sleep(0.1)  # idle: blocked in its waits
            PriorityProbe.set(priority=50 if kind != "plain" else 0).perform_async(time.time())
            deadline = time.monotonic() + 10
            while not client.llen("bench:priority"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the probe did not run")
                time.sleep(0.0005)
            samples[kind].append(float(client.lindex("bench:priority", 0)) * 1000)
    for kind, values in samples.items():
        print(
            f"| idle worker -P 1 -c 2, {kind} push | {len(values)} | {percentile(values, 0.5):.2f} | "
            f"{percentile(values, 0.99):.2f} | {max(values):.2f} | {values[0]:.2f} | | idle |"
        )


def drain(tree: Path, redis_url: str, jobs: int) -> float:
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushall()
    push = (
        "import os, sys; sys.path.insert(0, os.getcwd()); os.environ['DJANGO_SETTINGS_MODULE'] = 'bench.settings'\n"
        "import django; django.setup()\n"
        "from bench.jobs import NoopJob\n"
        f"NoopJob.perform_bulk([[index] for index in range({jobs})])\n"
    )
    with Workers(tree, redis_url, ["-P", "2", "-c", "10", "-q", "default"], 2):
        client.sadd("jobsapp:paused", "default")
        subprocess.run([sys.executable, "-c", push], cwd=tree, env={**os.environ, "REDIS_URL": redis_url}, check=True)
        time.sleep(0.3)
        started = time.perf_counter()
        client.srem("jobsapp:paused", "default")
        while int(client.get("stat:processed") or 0) < jobs:
            time.sleep(0.002)
        return jobs / (time.perf_counter() - started)


def push_cost(tree: Path, redis_url: str) -> float:
    import redis

    redis.Redis.from_url(redis_url).flushall()
    done = subprocess.run(
        [sys.executable, "-c", PUSH_SNIPPET],
        cwd=tree,
        env={**os.environ, "REDIS_URL": redis_url},
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def cost(before: Path, jobs: int, rounds: int) -> None:
    redis_url = os.environ["REDIS_URL"]
    trees = {"before": before, "after": ROOT}
    drains: dict[str, list[float]] = {name: [] for name in trees}
    pushes: dict[str, list[float]] = {name: [] for name in trees}
    print("| round | tree | drain jobs/s | push us/job |\n|---|---|---|---|")
    for index in range(rounds):
        order = list(trees) if index % 2 == 0 else list(reversed(trees))
        for name in order:
            rate = drain(trees[name], redis_url, jobs)
            push = push_cost(trees[name], redis_url)
            drains[name].append(rate)
            pushes[name].append(push)
            print(f"| {index + 1} | {name} | {rate:,.0f} | {push:.1f} |")
    for name in trees:
        print(f"| median | {name} | {statistics.median(drains[name]):,.0f} | {statistics.median(pushes[name]):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--run-ms", type=float, default=50.0)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    options = parser.parse_args()

    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    import django

    django.setup()
    try:
        if not options.skip_latency:
            print(
                "| backlog | probes | p50 ms | p99 ms | max ms | first probe ms | most in flight at a push | jobs/s meanwhile |\n"
                "|---|---|---|---|---|---|---|---|"
            )
            latency(options.backlog, options.run_ms / 1000, options.probes)
            idle(options.probes)
        if not options.skip_cost:
            if options.before is None:
                parser.error("--before DIR is needed for the cost (or --skip-cost)")
            cost(options.before.resolve(), options.jobs, options.rounds)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
