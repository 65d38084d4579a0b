"""What the processor spends per job, in process (run by hand, not a test):
``.venv/bin/python -m bench.processor_cpu --before DIR``.

A worker's processor thread runs every job through ``Processor.process``: decode, lookup, the
door's moments, the server chain, the guards around ``perform``, the outcome. This times that
call alone for a no-op ``NoopJob`` (plain: no option, no priority, no timeout), on the calling
thread's CPU clock (``time.thread_time``), with no fetch, ack or log line: the part of a job's cost
that a change to the processor moves, without the noise of a drain.

``--before DIR`` (a source tree of other code, e.g. ``git archive <commit> | tar -x -C DIR``):
each round runs the same measure in a fresh process of each tree, in alternating order, so the
load of a shared machine falls on both alike; prints each round and the medians. Without it,
this tree only. Options: ``--rounds N`` (default 6), ``--jobs N`` per round (default 20,000).
A throwaway redis-server serves the retry policy's client (a successful no-op job sends nothing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.redis_server import RedisServer  # noqa: E402

MEASURE = """
import os, sys, time
sys.path.insert(0, os.getcwd())
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
import django
django.setup()
from bench.jobs import NoopJob
from jobsapp import keys
from jobsapp.connection import get_redis
from jobsapp.payload import compact_json, new_jid, now
from jobsapp.worker.fetch import UnitOfWork
from jobsapp.worker.processor import Processor
from jobsapp.worker.retry import RetryPolicy

jobs = int(sys.argv[1])
processor = Processor(RetryPolicy(get_redis(), keys.inflight("bench:processor-cpu")))
processor.log_jobs = False
units = [
    UnitOfWork(compact_json({"class": NoopJob.wire_name(), "args": [index], "queue": "default", "jid": new_jid(),
        "retry": False, "created_at": now(), "enqueued_at": now()}).encode(), "default")
    for index in range(jobs)
]
for unit in units[:1000]:  # warm: imports, caches
    processor.process(unit)
started = time.thread_time()
for unit in units:
    result = processor.process(unit)
    if result is None or result.failed:
        raise SystemExit("a no-op job did not succeed")
print((time.thread_time() - started) / jobs * 1e6)
"""


def measure(tree: Path, jobs: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(jobs)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), "LOG_LEVEL": "WARNING"},
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=20_000)
    options = parser.parse_args()
    trees = {"after": ROOT} if options.before is None else {"before": options.before.resolve(), "after": ROOT}
    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    samples: dict[str, list[float]] = {name: [] for name in trees}
    try:
        print("| round | tree | processor CPU µs/job |\n|---|---|---|")
        for index in range(options.rounds):
            order = list(trees) if index % 2 == 0 else list(reversed(trees))
            for name in order:
                samples[name].append(measure(trees[name], options.jobs))
                print(f"| {index + 1} | {name} | {samples[name][-1]:.2f} |", flush=True)
        for name, values in samples.items():
            print(f"| median | {name} | {statistics.median(values):.2f} (best {min(values):.2f}) |")
        print(f"\nload average: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
