"""What results cost (run by hand): ``.venv/bin/python -m bench.results_overhead``.

Starts its own redis-server and one ``runworkers -P 2 -c 10`` and drains, in interleaved rounds
in that same run, N no-op jobs of each kind: a plain ``Job`` (nothing retained), a function job
(``@jobsapp.job``), a ``Job`` with ``retain=600``, and a Celery-style ``@shared_task`` (results
kept by default). Jobs are pushed while the queue is paused; the clock runs from resume until
``stat:processed`` has counted them all. Prints best and median jobs/s per kind.

Options: ``--jobs N`` (per kind and round, default 5,000), ``--rounds N`` (default 3).
"""

from __future__ import annotations

import argparse
import os
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
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()

    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    import django

    django.setup()
    from bench.jobs import NoopJob
    from bench.tasks import RetainedNoopJob, celery_noop, noop_function
    from jobsapp.celery.task import RESULT_EXPIRES_SECONDS
    from jobsapp.connection import get_redis

    kinds = {
        "Job, nothing retained": NoopJob,
        "@jobsapp.job function, nothing retained": noop_function.job_class,
        "Job with retain=600": RetainedNoopJob,
        "@shared_task (Celery-style, result kept)": celery_noop.job_class.set(retain=RESULT_EXPIRES_SECONDS),
    }
    client = get_redis()
    rates: dict[str, list[float]] = {name: [] for name in kinds}
    try:
        with Workers(server.url, ["-P", "2", "-c", "10", "-q", "default"], 2):
            for _ in range(options.rounds):
                for name, pusher in kinds.items():
                    client.sadd("jobsapp:paused", "default")
                    before = int(client.get("stat:processed") or 0)
                    pusher.perform_bulk([[index] for index in range(options.jobs)])
                    time.sleep(0.3)
                    started = time.perf_counter()
                    client.srem("jobsapp:paused", "default")
                    while int(client.get("stat:processed") or 0) - before < options.jobs:
                        time.sleep(0.002)
                    rates[name].append(options.jobs / (time.perf_counter() - started))
        retained = client.zcard("jobsapp:results")
    finally:
        server.stop()
    print(f"drain {options.jobs:,} no-op jobs per kind and round, -P 2 -c 10, {options.rounds} interleaved rounds")
    print("\n| kind | best | median |\n|---|---|---|")
    for name, values in rates.items():
        print(f"| {name} | {max(values):,.0f} jobs/s | {statistics.median(values):,.0f} jobs/s |")
    print(f"\n({retained:,} results retained at the end)")


if __name__ == "__main__":
    main()
