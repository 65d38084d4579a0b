"""How fast a cancel stops a running job, and what a cancel racing a job's end leaves (run by hand):
``.venv/bin/python -m bench.cancel_latency``.

Starts its own redis-server and one ``runworkers -c 4 -q cancel``. Latency: for each entry point,
in interleaved rounds, a probe job that loops in Python code is pushed; once it runs, the entry
point is called and the clock runs from the moment of the call until the job's thread stopped (the
time its ``finally`` block noted, in a frame around the loop). The entry points: ``api.cancel``
(a sync job, and an async one), the ``jobs cancel`` command (``call_command``, the command's own
work; a shell adds Django's start-up), the dashboard's Busy-page POST (the view, through a request
factory: its staff check and CSRF are passed), Celery's ``AsyncResult.revoke(terminate=True)``.
Prints p50, p99 and max per entry point in milliseconds, and the time the call itself took.

Race (``--races N``, default 1,000): probe jobs spinning 1-10 ms, each cancelled at a random moment
around its end; then each job's record is read: exactly one outcome each (succeeded, or failed with
reason ``cancelled``), none retried, ``stat:processed`` counting each once.

Cost of being cancellable: what a sync perform without a timeout pays (``Watchdog.cancellable``:
its thread noted, no guard), and what a guard costs (a job with a timeout), timed in process
against a bare call (no Redis).

Options: ``--cancels N`` per entry point (default 100), ``--races N``, ``--skip-race``.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from bench.engine import Workers  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

STARTED, STOPPED, DONE = "bench:cancel:started", "bench:cancel:stopped", "bench:cancel:done"


def _wait(condition: Callable[[], object], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.002)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


def entry_points() -> dict[str, tuple[Callable[[str, float], str], Callable[[str], object]]]:
    """name -> (push a probe and return its jid, cancel it by jid)."""
    from django.core.management import call_command
    from django.test import RequestFactory

    from bench.jobs import AsyncCancelProbe, CancelProbe
    from bench.tasks import cancel_probe
    from jobsapp import api
    from jobsapp.celery import AsyncResult
    from jobsapp.dashboard.actions import cancel_action

    factory = RequestFactory()
    staff = SimpleNamespace(is_authenticated=True, is_active=True, is_staff=True, is_superuser=True)

    def dashboard(jid: str) -> object:
        request = factory.post("/jobs/actions/cancel", {"jid": jid})
        request.user = staff  # type: ignore[assignment]
        request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
        return cancel_action(request)

    def push_sync(token: str, seconds: float) -> str:
        return str(CancelProbe.perform_async(token, seconds))

    def push_async(token: str, seconds: float) -> str:
        return str(AsyncCancelProbe.perform_async(token, seconds))

    def push_task(token: str, seconds: float) -> str:
        return cancel_probe.apply_async((token, seconds), queue="cancel").id

    return {
        "api.cancel (sync job)": (push_sync, api.cancel),
        "api.cancel (async job)": (push_async, api.cancel),
        "jobs cancel (command)": (push_sync, lambda jid: call_command("jobs", "cancel", jid, stdout=open(os.devnull, "w"))),
        "dashboard Busy page POST": (push_sync, dashboard),
        "Celery revoke(terminate=True)": (push_task, lambda jid: AsyncResult(jid).revoke(terminate=True)),
    }


def measure_latency(client, cancels: int) -> None:
    points = entry_points()
    latencies: dict[str, list[float]] = {name: [] for name in points}
    call_times: dict[str, list[float]] = {name: [] for name in points}
    for round_number in range(cancels):
        for name, (push, cancel) in points.items():
            token = f"{name}-{round_number}"
            jid = push(token, 30.0)
            _wait(lambda token=token: client.hexists(STARTED, token))
            time.sleep(0.01)
            asked = time.time()
            cancel(jid)
            call_times[name].append(time.time() - asked)
            _wait(lambda token=token: client.hexists(STOPPED, token))
            latencies[name].append(float(client.hget(STOPPED, token)) - asked)
            if client.hexists(DONE, token):
                raise RuntimeError(f"{token} was not cancelled")
    print(f"\nCancel latency, {cancels} cancels per entry point (interleaved), from the call to the job's thread stopping")
    print("\n| entry point | p50 ms | p99 ms | max ms | the call itself, p50 ms |\n|---|---|---|---|---|")
    for name in points:
        values = [value * 1000 for value in latencies[name]]
        calls = [value * 1000 for value in call_times[name]]
        print(
            f"| {name} | {statistics.median(values):.1f} | {_percentile(values, 0.99):.1f} | {max(values):.1f} | "
            f"{statistics.median(calls):.1f} |"
        )


def race(client, races: int) -> None:
    from bench.jobs import CancelProbe
    from jobsapp import api, results

    rng = random.Random(29)
    time.sleep(1.0)  # the latency probes' acknowledgements are counted first
    processed_before = int(client.get("stat:processed") or 0)
    jids = []
    for index in range(races):
        token = f"race-{index}"
        jid = CancelProbe.perform_async(token, rng.uniform(0.001, 0.010))
        jids.append(jid)
        _wait(lambda token=token: client.hexists(STARTED, token))
        time.sleep(rng.uniform(0, 0.012))
        api.cancel(jid)
    _wait(lambda: int(client.get("stat:processed") or 0) - processed_before >= races, 60)
    outcomes = {"succeeded": 0, "cancelled": 0, "cancelled after its last line": 0, "other": 0}
    for index, jid in enumerate(jids):
        record = results.get(jid)
        done = client.hexists(DONE, f"race-{index}")
        if record is not None and record.status == results.SUCCEEDED and done:
            outcomes["succeeded"] += 1
        elif record is not None and (record.status, record.reason) == (results.FAILED, "cancelled"):
            outcomes["cancelled"] += 1
            outcomes["cancelled after its last line"] += done
        else:
            outcomes["other"] += 1
    processed = int(client.get("stat:processed") or 0) - processed_before
    print(f"\nRace: {races} jobs spinning 1-10 ms, each cancelled at a random moment around its end")
    print(f"outcomes: {outcomes}; counted processed: {processed}; retry set: {client.zcard('retry')}; dead set: {client.zcard('dead')}")


def guard_cost(calls: int = 200_000) -> None:
    from jobsapp.worker.timeouts import Watchdog

    watchdog = Watchdog()

    def perform() -> None:
        return None

    bare, noted, guarded = [], [], []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            perform()
        bare.append((time.perf_counter() - started) / calls)
        started = time.perf_counter()
        for _ in range(calls):
            watchdog.cancellable(perform, jid="j")()
        noted.append((time.perf_counter() - started) / calls)
        started = time.perf_counter()
        for _ in range(calls):
            watchdog.within(math.inf, perform, jid="j")()
        guarded.append((time.perf_counter() - started) / calls)
    watchdog.stop()
    print(
        f"\nBeing cancellable, per sync perform (best of 5 x {calls:,}; bare call {min(bare) * 1e6:.2f} µs): "
        f"a job without a timeout (cancellable) {(min(noted) - min(bare)) * 1e6:.2f} µs, "
        f"under a guard (as a job with a timeout) {(min(guarded) - min(bare)) * 1e6:.2f} µs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cancels", type=int, default=100)
    parser.add_argument("--races", type=int, default=1_000)
    parser.add_argument("--skip-race", action="store_true")
    options = parser.parse_args()

    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    import django

    django.setup()
    from jobsapp.connection import get_redis

    client = get_redis()
    try:
        with Workers(server.url, ["-c", "4", "-q", "cancel"], 1):
            measure_latency(client, options.cancels)
            if not options.skip_race:
                race(client, options.races)
    finally:
        server.stop()
    guard_cost()


if __name__ == "__main__":
    main()
