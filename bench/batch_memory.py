"""What a completed batch keeps in Redis (run by hand): ``.venv/bin/python -m bench.batch_memory``.

Starts its own redis-server, opens a ``jobsapp.batch.Batch`` of N jobs (counted as the client
counts a push, without queueing N payloads), reports each job's outcome as the worker's "job
ended" door does (``job_finished``; a share of them failed first, then succeeded on a retry),
and prints ``MEMORY USAGE`` (SAMPLES 0: every element counted) and TTL of each of the batch's keys
while half the jobs have run and once every job has. Also prints what a late duplicate report
does to the counts.

Options: ``--jobs N`` (default 100,000), ``--failing N`` (jobs that fail before they succeed,
default 100).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from tests.redis_server import RedisServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--failing", type=int, default=100)
    options = parser.parse_args()

    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    import django

    django.setup()
    from jobsapp import keys
    from jobsapp.batch import Batch, count_pushed, job_finished
    from jobsapp.connection import get_redis
    from jobsapp.payload import new_jid

    client = get_redis()

    def report(moment: str, bid: str) -> None:
        print(f"\n{moment}")
        print("| key | type | entries | MEMORY USAGE | TTL |\n|---|---|---|---|---|")
        total = 0
        for key in (keys.batch(bid), keys.batch_succeeded(bid), keys.batch_failed(bid)):
            kind = client.type(key).decode()
            if kind == "none":
                print(f"| `{key}` | (none) | 0 | 0 B | - |")
                continue
            entries = client.hlen(key) if kind == "hash" else client.scard(key)
            usage = int(client.memory_usage(key, samples=0) or 0)
            total += usage
            print(f"| `{key}` | {kind} | {entries:,} | {usage:,} B | {client.ttl(key):,} s |")
        print(f"| all | | | {total:,} B ({total / options.jobs:.1f} B per job) | |")

    try:
        batch = Batch(description="memory")
        jids = [new_jid() for _ in range(options.jobs)]
        with batch.jobs():
            pipe = client.pipeline(transaction=True)
            count_pushed(pipe, batch.bid, options.jobs)
            pipe.execute()
        failing = set(jids[: options.failing])
        for jid in failing:
            job_finished(client, {"jid": jid, "bid": batch.bid}, succeeded=False)
        half = options.jobs // 2
        for jid in jids[options.failing : half]:
            job_finished(client, {"jid": jid, "bid": batch.bid}, succeeded=True)
        report(f"batch of {options.jobs:,} jobs, {half:,} run ({options.failing:,} failed):", batch.bid)
        for jid in jids[half:]:
            job_finished(client, {"jid": jid, "bid": batch.bid}, succeeded=True)
        report("every job run once (complete; the failed ones wait for their retry):", batch.bid)
        for jid in failing:
            job_finished(client, {"jid": jid, "bid": batch.bid}, succeeded=True)
        report("the failed ones succeeded on their retry (success):", batch.bid)
        job_finished(client, {"jid": jids[-1], "bid": batch.bid}, succeeded=True)
        job_finished(client, {"jid": jids[0], "bid": batch.bid}, succeeded=False)
        status = batch.status()
        assert status is not None
        print(
            f"\nafter a late duplicate success and failure: total {status.total:,}, succeeded {status.succeeded:,}, "
            f"failed {status.failed:,}, pending {status.pending:,}"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
