"""Where a drain's CPU goes (run by hand, not a test):
``.venv/bin/python -m bench.profile_drain --system reliable --kind incr -P 2 -c 10``.

Launches one system's workers (``bench.side_by_side``'s fleets: real Sidekiq or jobsapp) on a
throwaway Redis, lets them register and idle, releases ``--jobs`` jobs at once and prints jobs/s
with what the workers and Redis spent per job, read from /proc: user and system CPU and context
switches. These per-job costs move less with other load on the machine than jobs/s does, so they
are the numbers to compare before and after a change.

- ``--strace``: ``strace -c -f`` on the first worker process for ``--strace-seconds`` (it slows that
  process a lot: compare calls per job, not time), written to ``/tmp/jobsapp-profile/strace.txt``;
- ``--py-spy FILE``: ``py-spy record --gil`` of the first worker for the whole drain, in py-spy's
  raw (collapsed stacks) format: only the thread holding the GIL is sampled, so the stacks show
  where a GIL-bound process spends its time;
- ``--commands``: the Redis commands the drain sent, per job (``INFO commandstats``, reset as the
  jobs are released; the benchmark's own polling of the done counter is left out);
- ``--per-thread``: the workers' CPU per job by thread (jobsapp only): the processor threads, the
  fetcher, the acker and the rest, named by ``py-spy dump`` before the drain and summed over the
  processes; it shows how much of a job's cost the threads that run jobs pay themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.side_by_side import KINDS, PYTHON_ONLY_KINDS, Bench, Fleet, session_pids, setup_django
from tests.redis_server import RedisServer

TICKS = os.sysconf("SC_CLK_TCK")
OUTPUT_DIR = Path("/tmp/jobsapp-profile")


def task_cpu(pid: int, tid: int) -> tuple[float, float, int]:
    """User seconds, system seconds and context switches (voluntary and not) of one thread."""
    base = Path(f"/proc/{pid}/task/{tid}")
    fields = (base / "stat").read_text().rsplit(")", 1)[1].split()
    switches = sum(int(line.split()[1]) for line in (base / "status").read_text().splitlines() if "ctxt_switches" in line)
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS, switches


def process_cpu(pid: int) -> tuple[float, float, int]:
    """The sums of ``task_cpu`` over a process's live threads."""
    user = system = 0.0
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            one = task_cpu(pid, int(task.name))
        except OSError:  # the thread ended meanwhile
            continue
        user += one[0]
        system += one[1]
        switches += one[2]
    return user, system, switches


def thread_names(pid: int) -> dict[int, str]:
    """A Python process's threads: OS thread id -> thread name (``py-spy dump --json``), with the
    number of a numbered name (``jobsapp.processor-3``) replaced by ``N`` to group them."""
    spy = str(Path(sys.executable).with_name("py-spy"))
    dumped = subprocess.run([spy, "dump", "--json", "--pid", str(pid)], capture_output=True, text=True, check=True).stdout
    return {thread["os_thread_id"]: re.sub(r"-\d+$", "-N", thread["thread_name"] or "?") for thread in json.loads(dumped)}


def threads_cpu(pids: list[int]) -> dict[tuple[int, int], tuple[float, float, int]]:
    """``task_cpu`` of every live thread of ``pids``, by (pid, thread id)."""
    measured = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                measured[(pid, int(task.name))] = task_cpu(pid, int(task.name))
            except OSError:  # the thread ended meanwhile
                continue
    return measured


def print_per_thread(names: dict[tuple[int, int], str], before: dict, after: dict, jobs: int) -> None:
    """CPU per job and context switches per job of each group of like-named threads."""
    groups: dict[str, list[float]] = {}
    for key, (user, system, switches) in after.items():
        if key not in before:
            continue
        group = groups.setdefault(names.get(key, "?"), [0.0, 0.0, 0.0, 0.0])
        group[0] += user - before[key][0]
        group[1] += system - before[key][1]
        group[2] += switches - before[key][2]
        group[3] += 1
    total = sum(user + system for user, system, _, _ in groups.values()) or 1.0
    for name, (user, system, switches, count) in sorted(groups.items(), key=lambda item: -(item[1][0] + item[1][1])):
        if user + system == 0 and switches == 0:
            continue
        print(
            f"    {name} x{count:.0f}: user {user / jobs * 1e6:.1f} us/job, sys {system / jobs * 1e6:.1f} us/job "
            f"({100 * (user + system) / total:.0f} %), context switches {switches / jobs:.2f}/job"
        )


def profiler(options: argparse.Namespace, pid: int) -> subprocess.Popen[bytes] | None:
    if options.strace:
        OUTPUT_DIR.mkdir(exist_ok=True)
        command = ["strace", "-c", "-f", "-p", str(pid), "-o", str(OUTPUT_DIR / "strace.txt")]
    elif options.py_spy:
        spy = str(Path(sys.executable).with_name("py-spy"))
        command = [spy, "record", *(["--gil"] if options.gil else []), "-r", "250", "-f", "raw", "-o", options.py_spy, "-p", str(pid)]
    else:
        return None
    started = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached
    return started


def print_commands(commandstats: dict[str, dict[str, float]], jobs: int) -> None:
    """The commands of a drain, most frequent first, as calls per job (``GET``/``MGET``, the
    benchmark's own polling of the done counter, left out)."""
    calls = {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in commandstats.items()}
    for name in ("get", "mget", "config|resetstat", "info"):
        calls.pop(name, None)
    listed = ", ".join(f"{name} {count / jobs:.3f}" for name, count in sorted(calls.items(), key=lambda item: -item[1]))
    print(f"  Redis commands per job: {listed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", default="reliable", choices=["sidekiq", "reliable", "basic"])
    parser.add_argument("--kind", default="incr", choices=list(KINDS))
    parser.add_argument("-P", dest="processes", type=int, default=2)
    parser.add_argument("-c", dest="threads", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=60_000)
    parser.add_argument("--strace", action="store_true")
    parser.add_argument("--strace-seconds", type=float, default=2.0)
    parser.add_argument("--py-spy", metavar="FILE")
    parser.add_argument("--commands", action="store_true", help="Redis commands per job, from INFO commandstats")
    parser.add_argument("--per-thread", action="store_true", help="the workers' CPU per job by thread (jobsapp only)")
    parser.add_argument(
        "--logging",
        choices=["quiet", "fresh", "demo"],
        default="quiet",
        help="quiet: warnings only; fresh: each system's default level (a start and a done line per job, to a file), "
        "jobsapp without LOGGING (runworkers' own handler); demo: the same with the demo project's LOGGING",
    )
    parser.add_argument("--no-gil", dest="gil", action="store_false", help="py-spy samples every active thread, not only the GIL holder")
    options = parser.parse_args()

    if options.system == "sidekiq" and options.kind in PYTHON_ONLY_KINDS:
        parser.error(f"Sidekiq does not run the {options.kind} kind (Django only)")
    if options.system == "sidekiq" and options.per_thread:
        parser.error("--per-thread names Python threads: jobsapp only")
    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    setup_django()
    try:
        bench = Bench(argparse.Namespace(jobs=options.jobs, latency_seconds=1.0), server)
        bench.client.flushall()
        fleet = Fleet(options.system, options.processes, options.threads, server.url, bench.client, logging=options.logging)
        fleet.launch()
        try:
            fleet.wait_registered()
            time.sleep(1.5)
            bench.stage(options.system, options.kind, options.jobs)
            leaders = {command.pid for command in fleet.commands}
            workers = [pid for command in fleet.commands for pid in session_pids(command.pid)]
            if options.system != "sidekiq" and fleet.processes > 1:  # jobsapp's supervisor runs no job
                workers = [pid for pid in workers if pid not in leaders]
            redis_pid = server.process.pid if server.process is not None else 0
            watched = [*workers, redis_pid]
            names = {(pid, tid): name for pid in workers for tid, name in thread_names(pid).items()} if options.per_thread else {}
            before = {pid: process_cpu(pid) for pid in watched}
            threads_before = threads_cpu(workers) if options.per_thread else {}
            done_before = fleet.done()
            attached = profiler(options, workers[0])
            if options.commands:
                bench.client.config_resetstat()
            started = time.perf_counter()
            bench.release()
            if attached is not None and options.strace:
                time.sleep(options.strace_seconds)
                print(f"strace window: {fleet.done() - done_before:,} jobs done by all processes")
                attached.send_signal(2)
                attached.wait()
                attached = None
            fleet.wait_done(done_before + options.jobs, timeout_seconds=600)
            elapsed = time.perf_counter() - started
            after = {pid: process_cpu(pid) for pid in watched}
            threads_after = threads_cpu(workers) if options.per_thread else {}
            commands = bench.client.info("commandstats") if options.commands else {}
            if attached is not None:
                attached.send_signal(2)
                attached.wait()
        finally:
            fleet.stop()
        jobs = options.jobs
        print(f"{options.system} {options.kind} {options.processes}x{options.threads}: {jobs / elapsed:,.0f} jobs/s")
        for label, pids in (("workers", workers), ("redis", [redis_pid])):
            user = sum(after[pid][0] - before[pid][0] for pid in pids) / jobs * 1e6
            system = sum(after[pid][1] - before[pid][1] for pid in pids) / jobs * 1e6
            switches = sum(after[pid][2] - before[pid][2] for pid in pids) / jobs
            print(f"  {label}: user {user:.0f} us/job, sys {system:.0f} us/job, context switches {switches:.2f}/job")
            if label == "workers" and options.per_thread:
                print_per_thread(names, threads_before, threads_after, jobs)
        if commands:
            print_commands(commands, options.jobs)
        if options.strace:
            print(f"  system calls of one worker: {OUTPUT_DIR / 'strace.txt'}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
