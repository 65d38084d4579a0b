"""Tracking overhead benchmark (run by hand, not a test): ``.venv/bin/python -m bench.tracking_overhead``.

Starts its own throwaway redis-server and real ``runworkers`` processes (``-P 2 -c 10``) and, on
SQLite (a fresh WAL file) and on PostgreSQL (``--postgres URL``, default the CI server; a database
``tracking_bench``, or ``--database NAME``, is created there and dropped after), prints:

- the drain rate of 20,000 untracked no-op jobs, then of 20,000 tracked ones launched as one task
  with ``Task.objects.launch`` (jobs pushed while the queue is paused; the clock runs from
  resume until ``stat:processed`` / the task's ``finished_at`` says all are done), with the CPU
  per job of the workers and of the PostgreSQL server processes serving them (from /proc: it
  moves less with other load on the machine than jobs/s does, compare it before and after) and,
  on PostgreSQL, the WAL written and the transactions per tracked job (the server's, so anything
  else writing to it meanwhile counts too);
- how long launching a 100,000-job task takes (rows + push);
- the API's poll latency (``GET /api/tasks/<id>/``, p50/p99, plain and with a matching
  ``If-None-Match``) on that 100,000-job task while the workers drain it and write its events,
  with the polling thread's CPU per poll (what the request itself costs; the rest of its time is
  waiting for the database and for a core) and the load average before and after.

Each database runs in a child process of this script (Django's settings are per process).
Options: ``--jobs N`` (drain size), ``--rounds N`` (untracked and tracked drains alternated N
times, medians printed, each round too), ``--poll-jobs N`` (task size for the poll phase),
``--no-postgres``, ``--no-sqlite``, ``--database NAME`` (the PostgreSQL database to create and
drop), ``--py-spy FILE`` (``py-spy record --gil``, raw format, of one worker process during the
tracked drain: where its GIL time goes).
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MIDDLEWARE = {
    "CLIENT_MIDDLEWARE": ["tracking.middleware.TrackingClientMiddleware"],
    "SERVER_MIDDLEWARE": ["tracking.middleware.TrackingServerMiddleware"],
}
WORKER_ARGS = ["-P", "2", "-c", "10", "-q", "bench"]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of ``pids`` (each process's threads, ended ones included), from /proc."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended, or not on this machine
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def session_pids(session: int) -> list[int]:
    """The processes of a session (the workers: ``runworkers`` and its children)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[3]) == session:
                    pids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return pids


def environment(database_url: str, redis_url: str) -> dict[str, str]:
    """Settings for the child and its workers: the test settings (project + tracking middleware)."""
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "JOBSAPP_TEST_OVERRIDES": json.dumps(MIDDLEWARE),
        "LOG_LEVEL": "WARNING",
        # as in production: DEBUG on wraps every cursor to record its queries (~10% of a tracked job)
        "DJANGO_DEBUG": "0",
    }


# --- the child: one database ---------------------------------------------------------------


def measure(jobs: int, poll_jobs: int, py_spy: str | None = None, rounds: int = 1) -> dict[str, object]:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model
    from django.test import Client, override_settings

    from fixtures.jobs import Noop, UntrackedNoop
    from jobsapp import keys
    from jobsapp.connection import get_redis
    from tracking.models import Task

    redis = get_redis()
    results: dict[str, object] = {
        "database": f"{connection.vendor} {connection.Database.sqlite_version}"
        if connection.vendor == "sqlite"
        else f"{connection.vendor} {connection.cursor().connection.info.server_version}"
    }
    workers = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworkers", *WORKER_ARGS],
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while redis.scard(keys.PROCESSES) < 2:
            if time.monotonic() > deadline or workers.poll() is not None:
                raise RuntimeError("workers did not start")
            time.sleep(0.05)

        def backends() -> list[int]:
            """The database's server processes serving the workers (PostgreSQL on this machine)."""
            if connection.vendor != "postgresql":
                return []
            with connection.cursor() as cursor:
                cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
                return [row[0] for row in cursor.fetchall()]

        def wal_and_xid() -> tuple[int, int]:
            """The server's WAL position (bytes) and next transaction id: what every database of
            the server wrote meanwhile (PostgreSQL only; (0, 0) elsewhere)."""
            if connection.vendor != "postgresql":
                return 0, 0
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, txid_snapshot_xmax(txid_current_snapshot())")
                wal, xid = cursor.fetchone()
                return int(wal), int(xid)

        def drain(launch, done, name: str) -> float:
            redis.sadd(keys.PAUSED, "bench")
            launch()
            time.sleep(0.3)
            wal_before = wal_and_xid()
            workers_before = cpu_seconds(session_pids(workers.pid))
            servers_before = dict(zip(servers := backends(), [cpu_seconds([pid]) for pid in servers], strict=True))
            spy = None
            if py_spy and name == "tracked":  # one worker process (not runworkers' parent), whole drain
                child = min(pid for pid in session_pids(workers.pid) if pid != workers.pid)
                spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--gil", "-f", "raw",
                                        "-r", "250", "-p", str(child), "-o", py_spy], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)  # fmt: skip
                time.sleep(1.0)
            started = time.perf_counter()
            redis.srem(keys.PAUSED, "bench")
            while not done():
                time.sleep(0.005)
            elapsed = time.perf_counter() - started
            if spy is not None:
                spy.send_signal(2)
                spy.wait(30)
            workers_cpu = cpu_seconds(session_pids(workers.pid)) - workers_before
            servers_cpu = sum(cpu_seconds([pid]) - servers_before.get(pid, 0.0) for pid in backends())
            results[f"{name}_cpu"] = [workers_cpu / jobs * 1e6, servers_cpu / jobs * 1e6]
            wal_after = wal_and_xid()
            results[f"{name}_writes"] = [(wal_after[0] - wal_before[0]) / jobs, (wal_after[1] - wal_before[1]) / jobs]
            return jobs / elapsed

        def processed(target: int) -> Callable[[], bool]:
            """Done once ``stat:processed`` grew by ``target``: one Redis GET per look, the same for
            both drains (a database query every 5 ms would take a good part of a core from the
            workers on two cores, in the tracked drain only). A tracked job is acknowledged, and
            so counted, only after the batch that wrote its final status and finished its task
            committed (``jobsapp.hold_ack``), so the task is finished by then: checked below."""
            start = int(redis.get(keys.STAT_PROCESSED) or 0)
            return lambda: int(redis.get(keys.STAT_PROCESSED) or 0) - start >= target

        # written inline (not by LaunchChunk jobs in the drain), so the drain measures the runs
        inline = override_settings(TRACKING={"LAUNCH_INLINE_JOBS": jobs})
        rounds_seen: list[list[float]] = []
        cpu_seen: dict[str, list[list[float]]] = {"untracked": [], "tracked": []}
        for _ in range(rounds):  # alternating, so a change in the machine's load hits both
            untracked = drain(lambda: UntrackedNoop.perform_bulk([[index] for index in range(jobs)]), processed(jobs), "untracked")
            cpu_seen["untracked"].append(results["untracked_cpu"])  # type: ignore[arg-type]
            holder: dict[str, Task] = {}
            tracked = drain(
                lambda: holder.setdefault("task", inline(Task.objects.launch)(Noop, [[index] for index in range(jobs)])),  # noqa: B023
                processed(jobs),
                "tracked",
            )
            cpu_seen["tracked"].append(results["tracked_cpu"])  # type: ignore[arg-type]
            if not Task.objects.filter(pk=holder["task"].pk, finished_at__isnull=False).exists():
                raise RuntimeError("every tracked job was acknowledged but the task is not finished")
            rounds_seen.append([untracked, tracked])
        results["rounds"] = rounds_seen
        results["untracked_rate"] = sorted(pair[0] for pair in rounds_seen)[len(rounds_seen) // 2]
        results["tracked_rate"] = sorted(pair[1] for pair in rounds_seen)[len(rounds_seen) // 2]
        for name, seen in cpu_seen.items():  # medians per column
            results[f"{name}_cpu"] = [sorted(column)[len(column) // 2] for column in zip(*seen, strict=True)]

        # Poll latency on a big task while the workers write its events.
        user = get_user_model().objects.create_user(f"bench-{time.time_ns()}")
        redis.sadd(keys.PAUSED, "bench")
        started = time.perf_counter()
        task = Task.objects.launch(Noop, [[index] for index in range(poll_jobs)], owner=user)
        results["launch_seconds"] = time.perf_counter() - started
        client = Client()
        client.force_login(user)
        url = f"/api/tasks/{task.pk}/"
        plain: list[float] = []
        conditional: list[float] = []
        plain_cpu: list[float] = []  # this thread's CPU per poll: our code (and Django's, DRF's)
        with override_settings(TRACKING={"API_THROTTLE_RATE": "1000000/min"}):
            redis.srem(keys.PAUSED, "bench")
            load_before = os.getloadavg()[0]
            while not Task.objects.filter(pk=task.pk, finished_at__isnull=False).exists():
                started, cpu = time.perf_counter(), time.thread_time()
                response = client.get(url)
                plain.append((time.perf_counter() - started) * 1000)
                plain_cpu.append((time.thread_time() - cpu) * 1000)
                started = time.perf_counter()
                client.get(url, HTTP_IF_NONE_MATCH=response["ETag"])
                conditional.append((time.perf_counter() - started) * 1000)
        results["poll_plain"] = [percentile(plain, 0.5), percentile(plain, 0.99), len(plain)]
        results["poll_conditional"] = [percentile(conditional, 0.5), percentile(conditional, 0.99), len(conditional)]
        results["poll_cpu"] = [percentile(plain_cpu, 0.5), percentile(plain_cpu, 0.99)]
        results["poll_load"] = [load_before, os.getloadavg()[0]]
    finally:
        os.killpg(workers.pid, 15)
        workers.wait(60)
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
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--poll-jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1, help="alternating untracked/tracked drains (medians printed)")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--database", default="tracking_bench", help="the PostgreSQL database to create, use and drop")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--py-spy", metavar="FILE", help="py-spy record --gil (raw) of one worker during the tracked drain")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(measure(options.jobs, options.poll_jobs, options.py_spy, options.rounds)))
        return

    from tests.redis_server import RedisServer

    server = RedisServer().start()
    rows: list[tuple[str, str]] = []
    directory = Path(tempfile.mkdtemp(prefix="tracking-bench-"))
    databases = [] if options.no_sqlite else [("SQLite", f"sqlite:///{directory / 'bench.sqlite3'}")]
    if not options.no_postgres:
        databases.append(("PostgreSQL", postgres_database(options.postgres, options.database, drop=False)))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; workers {' '.join(WORKER_ARGS)}")
    try:
        for label, url in databases:
            server.client().flushall()
            child = subprocess.run(
                [sys.executable, "-m", "bench.tracking_overhead", "--child", "--jobs", str(options.jobs), "--rounds", str(options.rounds),
                 "--poll-jobs", str(options.poll_jobs), *(["--py-spy", options.py_spy] if options.py_spy else [])],
                cwd=ROOT, env=environment(url, server.url), capture_output=True, text=True, check=False,
            )  # fmt: skip
            if child.returncode != 0:
                print(f"{label}: failed\n{child.stderr[-3000:]}")
                continue
            result = json.loads(child.stdout.strip().splitlines()[-1])
            untracked, tracked = result["untracked_rate"], result["tracked_rate"]
            rows += [
                (f"{label} ({result['database']}): drain {options.jobs:,} untracked no-op jobs", f"{untracked:,.0f} jobs/s"),
                (f"{label}: drain {options.jobs:,} tracked no-op jobs (one task)",
                 f"{tracked:,.0f} jobs/s ({tracked / untracked:.0%} of untracked)"),
                (f"{label}: each round, untracked / tracked jobs/s",
                 "; ".join(f"{pair[0]:,.0f} / {pair[1]:,.0f} ({pair[1] / pair[0]:.0%})" for pair in result["rounds"])),
                (f"{label}: CPU per job, untracked / tracked (workers; database server)",
                 "{:.0f} / {:.0f} µs; {:.0f} / {:.0f} µs".format(
                     result["untracked_cpu"][0], result["tracked_cpu"][0], result["untracked_cpu"][1], result["tracked_cpu"][1])),
                *([(f"{label}: per tracked job, WAL written / write transactions (the whole server's)",
                    "{:.0f} bytes / {:.2f}".format(*result["tracked_writes"]))] if label == "PostgreSQL" else []),
                (f"{label}: launch a {options.poll_jobs:,}-job task (rows + push)", f"{result['launch_seconds']:.1f} s"),
                (f"{label}: poll GET /api/tasks/<id>/ while workers drain it",
                 "p50 {:.2f} ms, p99 {:.2f} ms ({} polls)".format(*result["poll_plain"])),
                (f"{label}: same poll with If-None-Match (304 when unchanged)",
                 "p50 {:.2f} ms, p99 {:.2f} ms ({} polls)".format(*result["poll_conditional"])),
                (f"{label}: that poll's CPU in the polling thread (the rest of its time is waiting)",
                 "p50 {:.2f} ms, p99 {:.2f} ms; load average {:.1f} -> {:.1f}".format(*result["poll_cpu"], *result["poll_load"])),
            ]  # fmt: skip
            for row in rows[-(9 if label == "PostgreSQL" else 8) :]:
                print(*row, sep=": ")
    finally:
        server.stop()
        if not options.no_postgres:
            postgres_database(options.postgres, options.database, drop=True)
    print("\n| measure | result |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
