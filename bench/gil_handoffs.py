"""What a shared GIL costs a short Redis-bound job, with no engine at all (run by hand, not a
test): ``.venv/bin/python -m bench.gil_handoffs``.

Starts its own throwaway redis-server; then, in one Python process, 1, 2, 3, 5 and 10 threads
share one plain ``redis.Redis`` client (as a job module makes one) and send ``INCR`` as fast as
they can, ``--ops`` in all per configuration, ``--rounds`` times in rotating order. It prints,
per thread count, the medians of calls per second, CPU per call (user + system, from
``getrusage``) and context switches per call. Every socket call releases the GIL; among busy
threads each release is a hand-off (a futex wake and wait, a context switch), which is what the
columns show growing with the threads. The same loop in Ruby (``--ruby``, redis gem) gives the
per-call CPU of Sidekiq's side for comparison.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.redis_server import RedisServer  # noqa: E402

THREAD_COUNTS = (1, 2, 3, 5, 10)

RUBY_LOOP = """
require "redis"
r = Redis.new(url: ARGV[0])
n = Integer(ARGV[1])
t0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
n.times { r.incr("bench:gil") }
puts (Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - t0) / n * 1e6
"""


def run(url: str, threads: int, ops: int) -> tuple[float, float, float]:
    """Calls per second, CPU us per call and context switches per call for ``threads`` threads."""
    client = redis.Redis.from_url(url)
    client.ping()
    each = ops // threads

    def work() -> None:
        for _ in range(each):
            client.incr("bench:gil")

    workers = [threading.Thread(target=work) for _ in range(threads)]
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    calls = each * threads
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    switches = (after.ru_nvcsw - before.ru_nvcsw) + (after.ru_nivcsw - before.ru_nivcsw)
    client.close()
    return calls / elapsed, cpu / calls * 1e6, switches / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--ruby", action="store_true", help="also the same loop in Ruby (redis gem), CPU per call")
    options = parser.parse_args()
    server = RedisServer().start()
    try:
        results: dict[int, list[tuple[float, float, float]]] = {count: [] for count in THREAD_COUNTS}
        for round_number in range(options.rounds):
            shift = round_number % len(THREAD_COUNTS)
            for count in THREAD_COUNTS[shift:] + THREAD_COUNTS[:shift]:
                results[count].append(run(server.url, count, options.ops))
        print("| threads | INCR/s | CPU per call, us | context switches per call |")
        print("|---|---|---|---|")
        for count, samples in results.items():
            rate, cpu, switches = (statistics.median(sample[index] for sample in samples) for index in range(3))
            print(f"| {count} | {rate:,.0f} | {cpu:.1f} | {switches:.2f} |")
        if options.ruby:
            command = ["ruby", "-e", RUBY_LOOP, server.url, str(options.ops)]
            ruby = [float(subprocess.run(command, capture_output=True, text=True, check=True).stdout) for _ in range(options.rounds)]
            print(f"\nRuby (redis gem), one thread: CPU per call {statistics.median(ruby):.1f} us")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
