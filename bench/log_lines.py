"""What a worker's per-job log lines cost, in process (run by hand, not a test):
``.venv/bin/python -m bench.log_lines --before DIR``.

A worker at INFO writes a *start* and a *done* line per job (``jobsapp.logs.JobLines``, called by
the processor threads). This runs those two calls alone, for ``--jobs`` jobs spread over
``--threads`` threads named as the processor's, through the handler ``runworkers`` installs in a
project without ``LOGGING`` (``logs.configure``: text or ``--format json``) writing to
``/dev/null``, flusher included, and prints the process's CPU per job (``time.process_time``,
every thread): the part of a job's cost the log lines add, without the noise of a drain. It needs
no Redis and no Django.

``--before DIR`` (a source tree of other code, e.g. ``git archive <commit> | tar -x -C DIR``):
each round runs the same measure in a fresh process of each tree, in alternating order, so the
load of a shared machine falls on both alike; prints each round and the medians. Without it,
this tree only. Options: ``--rounds N`` (default 8), ``--jobs N`` per round (default 40,000),
``--threads N`` (default 10).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MEASURE = """
import importlib.util, logging, sys, threading, time
spec = importlib.util.spec_from_file_location("measured_logs", "jobsapp/logs.py")  # the module alone: no Django
logs = importlib.util.module_from_spec(spec)
sys.modules["measured_logs"] = logs
spec.loader.exec_module(logs)

jobs, threads, log_format = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
stream = open("/dev/null", "w")
logs.configure(verbosity=1, log_format=log_format, stream=stream)
lines = logs.JobLines(logging.getLogger("jobsapp.processor"))

def run_jobs(count):
    for index in range(count):
        lines.started("bench.jobs.NoopJob", "0123456789abcdef01234567", "default")
        lines.finished("bench.jobs.NoopJob", "0123456789abcdef01234567", "default", 0.0000123)

run_jobs(1000)  # warm: the flusher started, the caches filled
logging.shutdown()
logs.configure(verbosity=1, log_format=log_format, stream=stream)
started = time.process_time()
workers = [threading.Thread(target=run_jobs, args=(jobs // threads,), name=f"jobsapp.processor-{n}") for n in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
logging.shutdown()  # the lines still waiting are written: their cost is counted
print((time.process_time() - started) / (jobs // threads * threads) * 1e6)
"""


def measure(tree: Path, jobs: int, threads: int, log_format: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(jobs), str(threads), log_format],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--format", dest="log_format", choices=["text", "json"], default="text")
    options = parser.parse_args()
    trees = {"after": ROOT} if options.before is None else {"before": options.before.resolve(), "after": ROOT}
    samples: dict[str, list[float]] = {name: [] for name in trees}
    print(f"| round | tree | CPU µs per job (two {options.log_format} lines) |\n|---|---|---|")
    for index in range(options.rounds):
        order = list(trees) if index % 2 == 0 else list(reversed(trees))
        for name in order:
            samples[name].append(measure(trees[name], options.jobs, options.threads, options.log_format))
            print(f"| {index + 1} | {name} | {samples[name][-1]:.2f} |", flush=True)
    for name, values in samples.items():
        print(f"| median | {name} | {statistics.median(values):.2f} (best {min(values):.2f}) |")
    print(f"\nload average: {' '.join(f'{value:.2f}' for value in os.getloadavg())}")


if __name__ == "__main__":
    main()
