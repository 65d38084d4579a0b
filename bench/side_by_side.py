"""jobsapp and real Sidekiq 6.4, side by side (run by hand, not a test):
``.venv/bin/python -m bench.side_by_side``.

One throwaway redis-server for both systems (flushed between runs), the same processes x threads
(Sidekiq OSS has no swarm: ``-P 2`` means two ``sidekiq`` commands), the same job bodies
(``bench/jobs.py`` and ``bench/sidekiq/jobs.rb``), each system's own client to enqueue (a Ruby
producer, ``bench/sidekiq/producer.rb``, for Sidekiq). Job kinds:

- ``empty``: ``perform`` does nothing;
- ``incr``: one Redis ``INCR`` on the job's own pool connection (one round trip);
- ``sleep``: a 1 ms I/O wait;
- ``cpu``: a fixed loop calibrated to ~100 us in each language, then one ``INCR``;

and the bodies Django users write, which pay their client's full per-command layers:

- ``plain-incr``: one ``INCR`` through a plain ``redis.Redis`` client made in the job module, whose
  connection pool gives each thread its own socket (for Sidekiq: a ``ConnectionPool`` of plain
  ``Redis.new`` clients made in the job file, likewise one connection per thread);
- ``cache-incr``: one django-redis ``cache.incr`` (jobsapp only: Sidekiq has no Django side);
- ``orm-get``: one ORM ``User.objects.get(pk=...)`` on SQLite (jobsapp only; a database made and
  migrated under /tmp/jobsapp-bench unless ``DATABASE_URL`` is set).

Two clocks per drain of ``--jobs`` jobs:

- *from launch*: the jobs wait in the queue, the clock starts when the worker command is spawned
  (start-up included) and stops when all are done;
- *warm*: workers registered and idle for a second; the jobs are pushed to a staging queue and
  ``RENAME``d onto the served queue at once; the clock starts at the rename.

"Done" is jobsapp's ``stat:processed`` (written by its batched acks) and, for Sidekiq (whose
``stat:processed`` is flushed every 5 s), an in-memory counter per process written to Redis every
5 ms by a thread (``bench/sidekiq/jobs.rb``). Also measured: enqueue one at a time and in bulk
(1,000 per call), latency enqueue -> start at a steady 200 jobs/s (p50/p99), and the RSS and PSS
of every process of each system after a warm drain (jobsapp's ``-P`` supervisor included).

Each round runs every system once per job kind and configuration, in a rotating order, so noise
from a shared machine falls on all columns alike; the table shows medians over ``--rounds`` and
ratios to Sidekiq from the same run. Options: ``--jobs``, ``--rounds``, ``--kinds``,
``--systems``, ``--configs`` (``PxC`` for every kind), ``--sweep`` (also ``1x20``, and ``4x5`` on the
``incr`` job, for Sidekiq and jobsapp's reliable fetch: each system's best split of 20 threads),
``--latency-seconds``, ``--push-cost`` (us per ``perform_async``, p50 and p99, with and without client
middleware and inside ``transaction.atomic()``, against Ruby's ``perform_async``), ``--startup``
(seconds from spawning the workers to the first job done and to full speed, empty jobs waiting).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import redis

ROOT = Path(__file__).resolve().parent.parent
RUBY_DIR = ROOT / "bench" / "sidekiq"
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from tests.redis_server import RedisServer  # noqa: E402

#: kind -> the job's class name, in bench.jobs and in bench/sidekiq/jobs.rb
KINDS = {
    "empty": "NoopJob",
    "incr": "IncrJob",
    "plain-incr": "PlainIncrJob",
    "cache-incr": "CacheIncrJob",
    "orm-get": "OrmGetJob",
    "sleep": "SleepJob",
    "cpu": "CpuJob",
}
#: Kinds only Django has (a django-redis cache, the ORM): Sidekiq does not run them.
PYTHON_ONLY_KINDS = {"cache-incr", "orm-get"}
#: The database the ``orm-get`` kind reads, made and migrated by the benchmark.
BENCH_DATABASE = Path("/tmp/jobsapp-bench/bench.sqlite3")
SYSTEMS = {"sidekiq": "Sidekiq 6.4", "reliable": "jobsapp reliable", "basic": "jobsapp --fetch basic"}
SWEEP_CONFIGS = [(1, 20), (4, 5)]
#: --logging mode -> what the measure's name says of it
LOGGING_LABELS = {
    "quiet": "",
    "fresh": ", INFO (default) logs",
    "demo": ", INFO logs, demo LOGGING",
}
#: The window over which start-up's "full speed" is measured.
STARTUP_WINDOW_SECONDS = 0.2
#: Sidekiq's own default threads per process (``-c``).
SIDEKIQ_DEFAULT_THREADS = 10
SERVED_QUEUE = "bench"
STAGING_QUEUE = "staging"
#: Where jobsapp's workers keep their compiled bytecode (``PYTHONPYCACHEPREFIX``): a deployed
#: worker starts from cached bytecode (pip compiles on install, images run ``compileall``), and
#: this keeps the source tree free of ``__pycache__`` even where PYTHONDONTWRITEBYTECODE is set.
PYCACHE = Path("/tmp/jobsapp-bench/pycache")
#: Where the workers' log lines go at ``--logging fresh`` or ``demo`` (a file, as a deployed worker's output).
LOG_DIRECTORY = Path("/tmp/jobsapp-bench/logs")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


def session_pids(leader: int) -> list[int]:
    """Every live process whose session is ``leader``'s (a worker command and what it forked)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == leader and fields[0] != "Z":  # field 6 (session), after the name
            pids.append(int(entry.name))
    return pids


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in KiB from /proc/<pid>/smaps_rollup."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss"):
            values[name] = int(rest.split()[0])
    return values["Rss"], values["Pss"]


@dataclass
class Fleet:
    """One system's worker commands for one configuration."""

    system: str
    processes: int
    threads: int
    redis_url: str
    client: redis.Redis
    #: False: the project's modules are compiled at every start (PYTHONDONTWRITEBYTECODE=1, no
    #: bytecode cache for them), as a source checkout run with that variable set
    bytecode: bool = True
    #: "quiet": both systems log warnings only; "fresh": each system's default level (INFO: a start
    #: and a done line per job), jobsapp in a project without ``LOGGING`` (runworkers' own
    #: handler); "demo": the same with the demo project's ``LOGGING`` (a ``logging.StreamHandler``).
    #: Lines go to a file under /tmp/jobsapp-bench/logs, as a deployed worker's output.
    logging: str = "quiet"

    def __post_init__(self) -> None:
        self.commands: list[subprocess.Popen[bytes]] = []
        #: 0 x 0: each system's defaults (jobsapp: no -P, no -c; Sidekiq: one process per core, -c 10)
        self.defaults = self.processes == 0
        if self.defaults:
            from jobsapp.conf import jobs_settings
            from jobsapp.worker.launcher import default_processes

            if self.system == "sidekiq":
                self.processes, self.threads = os.cpu_count() or 1, SIDEKIQ_DEFAULT_THREADS
            else:
                self.processes, self.threads = default_processes(), int(jobs_settings.CONCURRENCY)

    def launch(self) -> None:
        env = {**python_environment(bytecode=self.bytecode), "REDIS_URL": self.redis_url, "BENCH_LOGGING": self.logging}
        if self.system == "sidekiq":
            command = ["sidekiq", "-r", str(RUBY_DIR / "jobs.rb"), "-c", str(self.threads), "-q", SERVED_QUEUE, "-t", "5"]
            copies = self.processes
        else:
            command = [sys.executable, str(ROOT / "manage.py"), "runworkers"]
            if not self.defaults:
                command += ["-P", str(self.processes), "-c", str(self.threads)]
            command += ["-q", SERVED_QUEUE, "--fetch", self.system, "-t", "5"]
            copies = 1
        for copy in range(copies):
            log: int | IO[bytes] = subprocess.DEVNULL
            if self.logging != "quiet":
                LOG_DIRECTORY.mkdir(parents=True, exist_ok=True)
                log = (LOG_DIRECTORY / f"{self.system}-{copy}.log").open("wb")
            self.commands.append(subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True))
            if log is not subprocess.DEVNULL:
                log.close()  # the child has its own descriptor

    def done(self) -> int:
        if self.system == "sidekiq":
            values = self.client.mget([f"bench:sidekiq:done:{command.pid}" for command in self.commands])
            return sum(int(value or 0) for value in values)
        return int(self.client.get("stat:processed") or 0)

    def wait_registered(self) -> None:
        deadline = time.monotonic() + 60
        while self.client.scard("processes") < self.processes:
            if time.monotonic() > deadline or any(command.poll() is not None for command in self.commands):
                raise RuntimeError(f"{self.system} workers did not start")
            time.sleep(0.05)

    def wait_done(self, target: int, *, timeout_seconds: float) -> None:
        deadline = time.monotonic() + timeout_seconds
        while self.done() < target:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.system}: only {self.done()} of {target} jobs done in {timeout_seconds:.0f} s")
            time.sleep(0.002)

    def memory(self) -> tuple[list[int], list[int]]:
        rss, pss = [], []
        for command in self.commands:
            for pid in session_pids(command.pid):
                try:
                    one_rss, one_pss = memory_kib(pid)
                except (OSError, KeyError):
                    continue
                rss.append(one_rss)
                pss.append(one_pss)
        return rss, pss

    def stop(self) -> None:
        for command in self.commands:
            try:
                os.killpg(command.pid, 15)
            except ProcessLookupError:
                pass
        for command in self.commands:
            try:
                command.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(command.pid, 9)
                command.wait()


class Bench:
    def __init__(self, options: argparse.Namespace, server: RedisServer) -> None:
        from jobsapp.connection import get_redis

        self.options = options
        self.server = server
        self.client = get_redis()
        self.results: dict[tuple[str, str], list[float]] = {}
        self.ruby_env = {**os.environ, "REDIS_URL": server.url}
        self.ruby_iterations = int(self.ruby("calibrate", "100").strip())
        self.python_iterations = calibrate_python(100)

    def record(self, measure: str, system: str, value: float) -> None:
        self.results.setdefault((measure, system), []).append(value)

    def ruby(self, *args: str) -> str:
        return subprocess.run(
            ["ruby", str(RUBY_DIR / "producer.rb"), *args], env=self.ruby_env, check=True, capture_output=True, text=True
        ).stdout

    def stage(self, system: str, kind: str, count: int) -> None:
        """``count`` jobs of ``kind`` in the staging queue, pushed by the system's own client."""
        if system == "sidekiq":
            args = [self.ruby_iterations] if kind == "cpu" else []
            self.ruby("stage", str(count), KINDS[kind], STAGING_QUEUE, json.dumps(args))
            return
        from bench import jobs

        args: list[object] = [self.python_iterations] if kind == "cpu" else []
        if kind == "cache-incr":
            from django.core.cache import cache

            cache.set("bench:counter", 0, timeout=None)
        if kind == "orm-get":
            args = [self.orm_pk()]
        getattr(jobs, KINDS[kind]).set(queue=STAGING_QUEUE).perform_bulk([list(args) for _ in range(count)])

    def orm_pk(self) -> int:
        """The primary key of the row ``orm-get`` jobs read (created once)."""
        from django.contrib.auth.models import User

        return User.objects.get_or_create(username="bench")[0].pk

    def release(self) -> None:
        self.client.rename(f"queue:{STAGING_QUEUE}", f"queue:{SERVED_QUEUE}")

    def drain(self, system: str, kind: str, processes: int, threads: int, *, extras: bool, logging: str = "quiet") -> None:
        count = self.options.jobs
        config = config_name(processes, threads) + LOGGING_LABELS[logging]
        self.client.flushall()
        fleet = Fleet(system, processes, threads, self.server.url, self.client, logging=logging)
        timeout = 60 + count / 200
        try:
            # from launch: the jobs wait in the queue before the workers exist
            self.stage(system, kind, count)
            self.release()
            started = time.perf_counter()
            fleet.launch()
            fleet.wait_done(count, timeout_seconds=timeout)
            self.record(f"{kind} job, from launch, {config}", system, count / (time.perf_counter() - started))
            # warm: registered, idle for a second, then every job appears at once
            fleet.wait_registered()
            time.sleep(1.0)
            self.stage(system, kind, count)
            before = fleet.done()
            started = time.perf_counter()
            self.release()
            fleet.wait_done(before + count, timeout_seconds=timeout)
            self.record(f"{kind} job, warm, {config}", system, count / (time.perf_counter() - started))
            if extras:
                rss, pss = fleet.memory()
                self.record(f"RSS per process after the drain, MB, {config}", system, statistics.mean(rss) / 1024)
                self.record(f"PSS of all processes after the drain, MB, {config}", system, sum(pss) / 1024)
                self.latency(system)
        finally:
            fleet.stop()

    def latency(self, system: str) -> None:
        rate = 200
        seconds = self.options.latency_seconds
        total = int(rate * seconds)
        self.client.delete("bench:latency")
        if system == "sidekiq":
            self.ruby("steady", str(rate), str(seconds), SERVED_QUEUE)
        else:
            from bench.jobs import LatencyArgumentProbe

            probe = LatencyArgumentProbe.set(queue=SERVED_QUEUE)
            started = time.perf_counter()
            for index in range(total):
                delay = started + index / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                probe.perform_async(time.time())
        deadline = time.monotonic() + 30
        while self.client.llen("bench:latency") < total and time.monotonic() < deadline:
            time.sleep(0.05)
        samples = [float(value) * 1000 for value in self.client.lrange("bench:latency", 0, -1)]
        self.record("latency enqueue -> start at 200 jobs/s, p50 ms", system, percentile(samples, 0.5))
        self.record("latency enqueue -> start at 200 jobs/s, p99 ms", system, percentile(samples, 0.99))

    def startup(self, system: str, processes: int, threads: int, *, bytecode: bool = True) -> None:
        """Seconds from spawning the worker commands to the first job done, and to full speed:
        the first moment the rate over the next ``STARTUP_WINDOW_SECONDS`` reaches 80 % of the
        rate of the drain's second half (empty jobs already waiting in the queue)."""
        count = self.options.jobs
        self.client.flushall()
        fleet = Fleet(system, processes, threads, self.server.url, self.client, bytecode=bytecode)
        try:
            self.stage(system, "empty", count)
            self.release()
            started = time.perf_counter()
            fleet.launch()
            samples: list[tuple[float, int]] = []
            deadline = time.monotonic() + 60 + count / 200
            done = 0
            while done < count and time.monotonic() < deadline:
                done = fleet.done()
                samples.append((time.perf_counter() - started, done))
                time.sleep(0.002)
        finally:
            fleet.stop()
        first, first_count = next((moment, value) for moment, value in samples if value > 0)
        half = next(index for index, (_, value) in enumerate(samples) if value >= count / 2)
        steady = (samples[-1][1] - samples[half][1]) / max(1e-9, samples[-1][0] - samples[half][0])
        full = samples[-1][0]
        ahead = 0
        for moment, value in samples:
            while ahead < len(samples) - 1 and samples[ahead][0] < moment + STARTUP_WINDOW_SECONDS:
                ahead += 1
            if (samples[ahead][1] - value) / max(1e-9, samples[ahead][0] - moment) >= 0.8 * steady:
                full = moment
                break
        config = config_name(processes, threads)
        note = "" if bytecode else ", every project module compiled at start"
        if first_count <= count / 10:
            # else the first count seen already held a tenth of the drain: the counter was sent in
            # batches (basic fetch's count-only acks wait while jobs keep finishing, up to a
            # second), so its first rise says when a batch was sent, not when a job first ran
            self.record(f"start-up, {config}{note}: spawn -> first job done, s", system, first)
        if len({value for _, value in samples[half:]}) >= 3:
            # else the second half was counted in one or two steps (basic fetch's count-only acks
            # gather for up to a second): no steady rate to compare with, no "full speed" figure
            self.record(f"start-up, {config}{note}: spawn -> full speed, s", system, full)

    def push_cost(self) -> None:
        """Microseconds per ``perform_async`` (p50, p99), one at a time as a web request pushes:
        Ruby's ``perform_async``; ours with the project's client middleware (tracking), without
        any, and inside ``transaction.atomic()`` (the push runs at commit; the block's own cost,
        a SQLite BEGIN and COMMIT, is included: it is what the request pays)."""
        from django.db import transaction
        from django.test import override_settings

        from bench.jobs import NoopJob
        from jobsapp.conf import jobs_settings

        count = 5_000
        self.client.flushall()
        p50, p99 = (float(value) for value in self.ruby("timed", str(count)).split())
        self.record("perform_async, us per push, p50", "sidekiq", p50)
        self.record("perform_async, us per push, p99", "sidekiq", p99)
        producer = NoopJob.set(queue="enqueue")
        variants = {
            "": (jobs_settings.CLIENT_MIDDLEWARE, False),
            " without client middleware": ([], False),
            " in atomic(), pushed at commit": (jobs_settings.CLIENT_MIDDLEWARE, True),
        }
        for label, (middleware, atomic) in variants.items():
            self.client.flushall()
            samples = []
            with override_settings(JOBSAPP={**settings_jobsapp(), "CLIENT_MIDDLEWARE": list(middleware)}):
                for index in range(count):
                    started = time.perf_counter()
                    if atomic:
                        with transaction.atomic():
                            producer.perform_async(index)
                    else:
                        producer.perform_async(index)
                    samples.append((time.perf_counter() - started) * 1e6)
            self.record(f"perform_async{label}, us per push, p50", "reliable", percentile(samples, 0.5))
            self.record(f"perform_async{label}, us per push, p99", "reliable", percentile(samples, 0.99))
        self.client.flushall()

    def enqueue(self) -> None:
        """Enqueue one at a time, the same loop on both sides (the setter made once, then
        ``perform_async`` per job, the client already connected), in alternating halves (Ruby,
        ours, Ruby, ours) so that a change of load falls on both; jobs/s over both halves and CPU
        us per push (the producer's user + system time, which moves less with other load)."""
        from bench.jobs import NoopJob

        single_count, bulk_count = 20_000, 200_000
        half = single_count // 2
        producer = NoopJob.set(queue="enqueue")
        producer.perform_async(-1)  # connects, as the Ruby side does before its clock starts
        seconds = {"sidekiq": 0.0, "reliable": 0.0}
        cpu_seconds = {"sidekiq": 0.0, "reliable": 0.0}
        for _ in range(2):
            self.client.flushall()
            rate, cpu_us = (float(value) for value in self.ruby("single", str(half)).split())
            seconds["sidekiq"] += half / rate
            cpu_seconds["sidekiq"] += cpu_us * half / 1e6
            self.client.flushall()
            cpu_started = time.process_time()
            started = time.perf_counter()
            for index in range(half):
                producer.perform_async(index)
            seconds["reliable"] += time.perf_counter() - started
            cpu_seconds["reliable"] += time.process_time() - cpu_started
        for system in ("sidekiq", "reliable"):
            self.record("enqueue one at a time, jobs/s", system, single_count / seconds[system])
            self.record("enqueue one at a time, CPU us per push", system, cpu_seconds[system] * 1e6 / single_count)
        self.client.flushall()
        self.record("enqueue in bulk (1,000 per call), jobs/s", "sidekiq", float(self.ruby("bulk", str(bulk_count))))
        self.client.flushall()
        started = time.perf_counter()
        producer.perform_bulk([[index] for index in range(bulk_count)])
        self.record("enqueue in bulk (1,000 per call), jobs/s", "reliable", bulk_count / (time.perf_counter() - started))
        self.client.flushall()

    def run(self) -> None:
        options = self.options
        configs = [(0, 0) if text == "defaults" else tuple(int(part) for part in text.split("x")) for text in options.configs]
        for round_number in range(options.rounds):
            print(f"round {round_number + 1}/{options.rounds}, load {os.getloadavg()[0]:.2f}", flush=True)
            if not options.drains_only:
                self.enqueue()
            if options.push_cost:
                self.push_cost()
            systems = options.systems[round_number % len(options.systems) :] + options.systems[: round_number % len(options.systems)]
            if options.startup:
                processes, threads = configs[0]
                for system in systems + systems[::-1]:  # twice each, in mirrored order: start-up moves with the load
                    self.startup(system, processes, threads)
                    print(f"  start-up {config_name(processes, threads)} {system} done", flush=True)
                if "reliable" in systems:
                    self.startup("reliable", *configs[0], bytecode=False)
            for kind in options.kinds:
                plan = [(processes, threads, systems) for processes, threads in configs]
                if options.sweep:
                    splits = SWEEP_CONFIGS if kind in ("incr", "plain-incr") else SWEEP_CONFIGS[:1]  # 4x5: the one-call jobs only
                    plan += [(processes, threads, [name for name in systems if name != "basic"]) for processes, threads in splits]
                for processes, threads, names in plan:
                    for logging in options.logging:
                        for system in names:
                            if system == "sidekiq" and (kind in PYTHON_ONLY_KINDS or logging == "demo"):
                                continue  # Sidekiq has no Django side, and one default logging
                            extras = kind == "empty" and (processes, threads) == configs[0] and logging == options.logging[0]
                            self.drain(system, kind, processes, threads, extras=extras, logging=logging)
                            print(f"  {kind} {config_name(processes, threads)}{LOGGING_LABELS[logging]} {system} done", flush=True)
        self.report(configs)

    def report(self, configs: list[tuple[int, ...]]) -> None:
        systems = self.options.systems
        print(
            f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{subprocess.run(['ruby', '-v'], capture_output=True, text=True).stdout.split('(')[0].strip()}, "
            f"Redis {self.client.info('server')['redis_version']}; {self.options.jobs:,} jobs per drain, "
            f"medians of {self.options.rounds} rounds; load at the end {os.getloadavg()[0]:.2f}\n"
        )
        header = "| measure | " + " | ".join(SYSTEMS[name] for name in systems) + " |"
        print(header)
        print("|---" * (len(systems) + 1) + "|")
        measures = list(dict.fromkeys(measure for measure, _ in self.results))
        for measure in measures:
            cells = []
            reference = self.median(measure, "sidekiq")
            for system in systems:
                value = self.median(measure, system)
                if value is None:
                    cells.append("")
                    continue
                text = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
                if system != "sidekiq" and reference:
                    text += f" ({value / reference:.2f}x)"
                cells.append(text)
            print(f"| {measure} | " + " | ".join(cells) + " |")
        if self.options.sweep:
            print()
            for kind in self.options.kinds:
                if kind in PYTHON_ONLY_KINDS:
                    continue
                best = {}
                for system in ("sidekiq", "reliable"):
                    splits = [split for split in [*configs, *SWEEP_CONFIGS] if split != (0, 0)]
                    best[system] = max((self.median(f"{kind} job, warm, {p}x{c}", system) or 0, f"{p}x{c}") for p, c in splits)
                ratio = best["reliable"][0] / best["sidekiq"][0] if best["sidekiq"][0] else 0
                print(
                    f"best split of 20 threads, {kind} job, warm: Sidekiq {best['sidekiq'][0]:,.0f} jobs/s ({best['sidekiq'][1]}), "
                    f"jobsapp {best['reliable'][0]:,.0f} jobs/s ({best['reliable'][1]}): {ratio:.2f}x"
                )

    def median(self, measure: str, system: str) -> float | None:
        values = self.results.get((measure, system))
        return statistics.median(values) if values else None


def settings_jobsapp() -> dict[str, object]:
    from django.conf import settings

    return dict(getattr(settings, "JOBSAPP", {}))


def python_environment(*, bytecode: bool) -> dict[str, str]:
    """The environment of jobsapp's worker commands: bytecode read from and written to
    ``PYCACHE``, or (``bytecode=False``) none written, so that the project's modules, which have
    no ``__pycache__`` here, are compiled at every start."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    return env


def warm_bytecode() -> None:
    """Compile what a worker imports into ``PYCACHE`` once, before anything is timed."""
    PYCACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); import jobsapp.management.commands.runworkers, jobsapp.worker.launcher"],
        env=python_environment(bytecode=True),
        cwd=ROOT,
        check=True,
    )


def config_name(processes: int, threads: int) -> str:
    return "defaults" if processes == 0 else f"{processes}x{threads}"


def setup_django() -> None:
    """Django set up for the benchmark process (the workers inherit its environment): a SQLite
    database of its own for the ``orm-get`` kind, migrated, unless ``DATABASE_URL`` names one."""
    if "DATABASE_URL" not in os.environ:
        BENCH_DATABASE.parent.mkdir(exist_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{BENCH_DATABASE}"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", "auth", verbosity=0, interactive=False)


def calibrate_python(microseconds: float) -> int:
    from bench.jobs import spin

    iterations, runs = 10_000, 200
    spin(iterations)
    started = time.perf_counter()
    for _ in range(runs):
        spin(iterations)
    per_run = (time.perf_counter() - started) / runs
    return round(iterations * microseconds / 1_000_000 / per_run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS), default=list(SYSTEMS))
    parser.add_argument(
        "--configs",
        nargs="+",
        default=["2x10"],
        help="PxC, processes x threads (default 2x10); 'defaults': jobsapp with no -P/-c, Sidekiq one process per core with -c 10",
    )
    parser.add_argument("--sweep", action="store_true", help="also 1x20 and 4x5 (Sidekiq and reliable fetch)")
    parser.add_argument(
        "--logging",
        nargs="+",
        choices=list(LOGGING_LABELS),
        default=["quiet"],
        help="quiet (default): both systems log warnings only; fresh: each system's default level, INFO, a start and a "
        "done line per job (jobsapp in a project without LOGGING: runworkers' own handler); demo: jobsapp with the demo "
        "project's LOGGING at INFO (a logging.StreamHandler; Sidekiq skipped). Lines go to files under /tmp/jobsapp-bench/logs",
    )
    parser.add_argument("--drains-only", action="store_true", help="skip the enqueue measures of every round")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--push-cost", action="store_true", help="also us per perform_async, p50 and p99")
    parser.add_argument("--startup", action="store_true", help="also seconds from launch to the first job done and to full speed")
    options = parser.parse_args()
    if shutil.which("sidekiq") is None and "sidekiq" in options.systems:
        raise SystemExit("the sidekiq command is not on PATH (Debian: apt-get install ruby-sidekiq)")

    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    setup_django()
    warm_bytecode()
    try:
        Bench(options, server).run()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
