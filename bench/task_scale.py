"""Tracked tasks at scale (run by hand, not a test): ``.venv/bin/python -m bench.task_scale``.

Starts its own throwaway redis-server and, on PostgreSQL (``--postgres URL``; a database
``task_scale_bench`` is created there and dropped after) or SQLite (``--sqlite``), prints:

- how long ``Task.objects.launch`` blocks its caller for 1,000, 10,000 and 100,000 jobs while
  ``runworkers -P 2 -c 10`` runs, then until the task is no longer ``launching`` (every event
  written, every job pushed) and until it is finished;
- while the largest task launches and drains: ``GET /api/tasks/<id>/`` p50/p99, and the events
  list filtered by status;
- at rest (finished), on the smallest and the largest task: the summary, the first and a deep
  page of ``/api/tasks/<id>/events/`` (five ``next`` links in), the admin's event list filtered
  to the task and the task's admin page, median of a few calls each (on PostgreSQL after an
  ``ANALYZE``, as autovacuum runs after bulk writes: the fresh database has no statistics).

Each database runs in a child process (Django's settings are per process). ``--sizes`` changes
the launch sizes (the largest is the one drained and polled).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.tracking_overhead import environment, percentile, postgres_database  # noqa: E402

WORKER_ARGS = ["-P", "2", "-c", "10", "-q", "bench"]


def timed_ms(call) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def measure(sizes: list[int]) -> dict[str, object]:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client, override_settings

    from fixtures.jobs import Noop
    from jobsapp import keys
    from jobsapp.connection import get_redis
    from tracking.models import Task

    redis = get_redis()
    user = get_user_model().objects.create_superuser(f"bench-{time.time_ns()}", password="x")
    results: dict[str, object] = {}
    tasks: dict[int, Task] = {}
    client = Client()
    client.force_login(user)

    def page_timings(task: Task) -> dict[str, float]:
        summary = f"/api/tasks/{task.pk}/"
        events = f"/api/tasks/{task.pk}/events/?page_size=50"
        admin = f"/admin/tracking/event/?task__id__exact={task.pk}"
        url = events
        for _ in range(5):  # a few pages in, by the links the API gives
            url = client.get(url).json().get("next") or url
        first = client.get(events).json()
        assert first["count"] == task.total, first["count"]
        return {
            "summary": statistics.median(timed_ms(lambda: client.get(summary)) for _ in range(15)),
            "events_first": statistics.median(timed_ms(lambda: client.get(events)) for _ in range(7)),
            "events_deep": statistics.median(timed_ms(lambda: client.get(url)) for _ in range(7)),
            "admin_events": statistics.median(timed_ms(lambda: client.get(admin)) for _ in range(5)),
            "admin_task": statistics.median(timed_ms(lambda: client.get(f"/admin/tracking/task/{task.pk}/change/")) for _ in range(5)),
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
        while redis.scard(keys.PROCESSES) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        with override_settings(TRACKING={"API_THROTTLE_RATE": "1000000/min"}):
            for size in sizes:
                polls: list[float] = []
                event_pages: list[float] = []
                started = time.perf_counter()
                task = Task.objects.launch(Noop, [[index] for index in range(size)], owner=user)
                returned = time.perf_counter() - started
                launched = None
                while time.perf_counter() - started < 900:
                    current = Task.objects.get(pk=task.pk)
                    if launched is None and current.status != "launching":
                        launched = time.perf_counter() - started
                    if current.finished_at is not None:
                        break
                    if size == max(sizes):  # the API while the workers launch and drain it
                        summary = f"/api/tasks/{task.pk}/"
                        polls.append(timed_ms(lambda url=summary: client.get(url)))
                        if len(polls) % 10 == 0:
                            finished = f"/api/tasks/{task.pk}/events/?status=finish"
                            event_pages.append(timed_ms(lambda url=finished: client.get(url)))
                    time.sleep(0.02)
                results[f"launch_{size}"] = [returned, launched or 0.0, time.perf_counter() - started]
                tasks[size] = task
                if polls:
                    results["poll_running"] = [percentile(polls, 0.5), percentile(polls, 0.99), len(polls)]
                    results["events_running"] = [percentile(event_pages, 0.5), percentile(event_pages, 0.99), len(event_pages)]
            if connection.vendor == "postgresql":
                # what autovacuum does after bulk writes: a never-analyzed table (this fresh
                # database) plans a task's page as a sort of all its events
                with connection.cursor() as cursor:
                    cursor.execute("ANALYZE")
            for size in (min(sizes), max(sizes)):
                results[f"rest_{size}"] = page_timings(tasks[size])
    finally:
        os.killpg(workers.pid, 15)
        workers.wait(60)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--sqlite", action="store_true", help="SQLite (a fresh file) instead of PostgreSQL")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    sizes = [int(size) for size in options.sizes.split(",")]
    if options.child:
        print(json.dumps(measure(sizes)))
        return

    import tempfile

    from tests.redis_server import RedisServer

    server = RedisServer().start()
    if options.sqlite:
        url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='task-scale-')) / 'bench.sqlite3'}"
    else:
        url = postgres_database(options.postgres, "task_scale_bench", drop=False)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; workers {' '.join(WORKER_ARGS)}")
    try:
        child = subprocess.run(
            [sys.executable, "-m", "bench.task_scale", "--child", "--sizes", options.sizes],
            cwd=ROOT, env=environment(url, server.url), capture_output=True, text=True, check=False,
        )  # fmt: skip
        if child.returncode != 0:
            print(f"failed\n{child.stderr[-3000:]}")
            return
        result = json.loads(child.stdout.strip().splitlines()[-1])
    finally:
        server.stop()
        if not options.sqlite:
            postgres_database(options.postgres, "task_scale_bench", drop=True)
    print("\n| measure | result |\n|---|---|")
    for size in sizes:
        returned, launched, finished = result[f"launch_{size}"]
        print(f"| launch {size:,} jobs: call returns / launched / finished | {returned:.2f} / {launched:.2f} / {finished:.1f} s |")
    for size in (min(sizes), max(sizes)):
        rest = result[f"rest_{size}"]
        print(
            f"| at rest, {size:,} jobs: summary / events first page / events 5 pages in / admin event list / admin task page |"
            f" {rest['summary']:.1f} / {rest['events_first']:.1f} / {rest['events_deep']:.1f} / {rest['admin_events']:.1f}"
            f" / {rest['admin_task']:.1f} ms |"
        )
    poll = result["poll_running"]
    print(f"| poll the summary while workers drain the largest task, p50 / p99 | {poll[0]:.1f} / {poll[1]:.1f} ms ({poll[2]} polls) |")
    print("| events ?status=finish while it drains, p50 / p99 | {:.1f} / {:.1f} ms ({} calls) |".format(*result["events_running"]))


if __name__ == "__main__":
    main()
