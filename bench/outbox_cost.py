"""The cost per push of the transactional outbox (run by hand, not a test):
``.venv/bin/python -m bench.outbox_cost``.

Starts its own throwaway redis-server and, on SQLite (a fresh WAL file, the project's settings:
``synchronous=NORMAL``, ``IMMEDIATE`` transactions) and on PostgreSQL (``--postgres URL``, default
the CI server; a database ``outbox_bench`` is created there and dropped after), times a web
request's transaction: ``with transaction.atomic():`` one business row (a ``User``) and ``pushes``
jobs (``NoopJob.perform_async``), from entering the block to leaving it, so the COMMIT, the push
at commit and, with the outbox, its INSERT and its DELETE are all inside. The two modes alternate
transaction by transaction (A, B, A, B...) so that load on the machine falls on both alike:

- ``on_commit``: ``JOBSAPP["OUTBOX"] = False``, today's ``transaction.on_commit`` push;
- ``outbox``: ``JOBSAPP["OUTBOX"] = True``.

Prints p50 and p99 per transaction for each, and the outbox's cost per push: the difference of
the p50s over the pushes per transaction. Options: ``--transactions N`` (per mode), ``--pushes N``
(per transaction; the run is made for 1 and for N), ``--no-postgres``, ``--no-sqlite``.
Each database runs in a child process of this script (Django's settings are per process).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUEUE = "outbox-bench"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


# --- the child: one database ---------------------------------------------------------------


def measure(transactions: int, pushes_options: list[int]) -> dict[str, object]:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection, transaction

    call_command("migrate", verbosity=0)
    from bench.jobs import NoopJob
    from jobsapp import keys, outbox
    from jobsapp.connection import get_redis
    from jobsapp.models import OutboxEntry

    redis = get_redis()
    vendor = connection.vendor
    version = connection.Database.sqlite_version if vendor == "sqlite" else connection.cursor().connection.info.server_version
    results: dict[str, object] = {"database": f"{vendor} {version}"}
    job = NoopJob.set(queue=QUEUE)
    counter = 0

    def one(with_outbox: bool, pushes: int) -> float:
        nonlocal counter
        settings.JOBSAPP["OUTBOX"] = with_outbox
        counter += 1
        name = f"bench-{os.getpid()}-{counter}"
        started = time.perf_counter()
        with transaction.atomic():
            User.objects.create(username=name)
            for index in range(pushes):
                job.perform_async(counter, index)
        return (time.perf_counter() - started) * 1e6

    for pushes in pushes_options:
        for _ in range(100):  # warm-up: connections, statements, the table check
            one(False, pushes)
            one(True, pushes)
        timings: dict[bool, list[float]] = {False: [], True: []}
        for index in range(transactions):
            for with_outbox in (False, True) if index % 2 == 0 else (True, False):
                timings[with_outbox].append(one(with_outbox, pushes))
            if index % 500 == 0:
                redis.delete(keys.queue(QUEUE))
                outbox.relay_due(grace_seconds=0, limit=100_000)
        outbox.relay_due(grace_seconds=0, limit=100_000)  # what the relay does once a second: the marked entries deleted
        assert not OutboxEntry.objects.exists(), "every entry was pushed and marked at its commit"
        results[f"on_commit_{pushes}"] = [percentile(timings[False], 0.5), percentile(timings[False], 0.99)]
        results[f"outbox_{pushes}"] = [percentile(timings[True], 0.5), percentile(timings[True], 0.99)]
    redis.delete(keys.queue(QUEUE))
    User.objects.filter(username__startswith="bench-").delete()
    return results


# --- the parent ----------------------------------------------------------------------------


def postgres_database(base_url: str, name: str, *, drop: bool) -> str:
    import psycopg

    with psycopg.connect(base_url, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop:
            connection.execute(f'CREATE DATABASE "{name}"')
    return base_url.rsplit("/", 1)[0] + f"/{name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transactions", type=int, default=2000)
    parser.add_argument("--pushes", type=int, default=10)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    pushes_options = sorted({1, options.pushes})
    if options.child:
        print(json.dumps(measure(options.transactions, pushes_options)))
        return

    from tests.redis_server import RedisServer

    server = RedisServer().start()
    directory = Path(tempfile.mkdtemp(prefix="outbox-bench-"))
    databases = [] if options.no_sqlite else [("SQLite", f"sqlite:///{directory / 'bench.sqlite3'}")]
    if not options.no_postgres:
        databases.append(("PostgreSQL", postgres_database(options.postgres, "outbox_bench", drop=False)))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    rows: list[tuple[str, ...]] = []
    try:
        for label, url in databases:
            env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": server.url, "DJANGO_SETTINGS_MODULE": "bench.settings"}
            env["DJANGO_DEBUG"] = "0"
            child = subprocess.run(
                [sys.executable, "-m", "bench.outbox_cost", "--child",
                 "--transactions", str(options.transactions), "--pushes", str(options.pushes)],
                cwd=ROOT, env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if child.returncode != 0:
                print(f"{label}: failed\n{child.stderr[-3000:]}")
                continue
            result = json.loads(child.stdout.strip().splitlines()[-1])
            for pushes in pushes_options:
                before, after = result[f"on_commit_{pushes}"], result[f"outbox_{pushes}"]
                per_push = (after[0] - before[0]) / pushes
                rows.append((
                    f"{label} ({result['database']})", str(pushes),
                    f"{before[0]:,.0f} / {before[1]:,.0f}", f"{after[0]:,.0f} / {after[1]:,.0f}", f"{per_push:+,.0f}",
                ))  # fmt: skip
                print(*rows[-1], sep=" | ")
    finally:
        server.stop()
        if not options.no_postgres:
            postgres_database(options.postgres, "outbox_bench", drop=True)
    print(
        "\n| database | pushes per transaction | on_commit: µs per transaction p50 / p99 | outbox: p50 / p99 | outbox cost per push (p50) |"
        "\n|---|---|---|---|---|"
    )
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
