"""What cluster mode costs a drain (run by hand, not a test):
``.venv/bin/python -m bench.cluster_cost [--jobs 5000] [--rounds 2] [--concurrency 10] [--baseline DIR]``.

Drains ``--jobs`` empty jobs (``bench.jobs.NoopJob``) of one queue with one worker process
(``runworkers -c --concurrency -P 1``) against a standalone redis-server, a one-master cluster, a
three-master cluster with every key behind one hash tag and the same with the queue spread over
three partitions (``CLUSTER_PARTITIONS = 3``), all started here on loopback, taking turns
``--rounds`` times (alternated, so a shared machine's load falls on each alike). With
``--baseline DIR`` (another checkout of the project, e.g. ``git archive <commit> | tar -x -C DIR``)
a standalone drain by that checkout's worker takes its turn too: the same machine's before and
after. Prints jobs per second of each run and the worker's CPU (user + system, from
``/proc/<pid>/stat``) per job over the same span, each configuration's medians, and the medians as
a share of standalone's. On a shared machine the rate follows the load; the CPU per job is the
engine's own cost and barely moves with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from tests.redis_cluster import RedisClusterServers  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drain(url: str, *, cluster: bool, jobs: int, concurrency: int, partitions: int = 1, tree: Path = ROOT) -> tuple[float, float]:
    """Jobs per second of one drain of ``jobs`` empty jobs pushed beforehand, by a worker of the
    checkout ``tree``, and the worker's CPU microseconds per job over the same span."""
    from django.conf import settings

    from jobsapp import client, connection, keys

    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": url, "REDIS_CLUSTER": cluster, "CLUSTER_PARTITIONS": partitions}
    connection.reset()
    engine = connection.get_redis()
    for start in range(0, jobs, 1000):
        client.push_bulk({"class": "bench.jobs.NoopJob", "args": [[] for _ in range(min(1000, jobs - start))], "queue": "default"})
    environment = {
        **os.environ,
        "REDIS_URL": url,
        "REDIS_CLUSTER": "1" if cluster else "0",
        "REDIS_CLUSTER_PARTITIONS": str(partitions),
        "DJANGO_SETTINGS_MODULE": "bench.settings",
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runworkers", "-c", str(concurrency), "-P", "1"],
        cwd=tree,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while int(engine.get(keys.STAT_PROCESSED) or 0) == 0:  # from the first job done: start-up not counted
            time.sleep(0.005)
        started = time.monotonic()
        cpu_at_start = cpu_seconds(worker.pid)
        first = int(engine.get(keys.STAT_PROCESSED) or 0)
        while int(engine.get(keys.STAT_PROCESSED) or 0) < jobs:
            time.sleep(0.01)
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(worker.pid) - cpu_at_start
        return (jobs - first) / elapsed, cpu / (jobs - first) * 1e6
    finally:
        worker.terminate()
        worker.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout whose worker drains standalone too")
    options = parser.parse_args()
    import django

    django.setup()
    standalone = RedisServer().start()
    one_master = RedisClusterServers(masters=1).start()
    three_masters = RedisClusterServers(masters=3).start()
    # (name, url, cluster, partitions, the worker's checkout)
    setups = [
        ("standalone", standalone.url, False, 1, ROOT),
        ("1-master cluster", one_master.url, True, 1, ROOT),
        ("3-master cluster", three_masters.url, True, 1, ROOT),
        ("3-master cluster, 3 partitions", three_masters.url, True, 3, ROOT),
    ]
    if options.baseline is not None:
        setups.insert(1, ("standalone (baseline)", standalone.url, False, 1, options.baseline.resolve()))
    rates: dict[str, list[float]] = {name: [] for name, *_ in setups}
    cpus: dict[str, list[float]] = {name: [] for name, *_ in setups}
    try:
        for round_number in range(options.rounds):
            for name, url, cluster, partitions, tree in setups:
                if cluster:
                    (one_master if name.startswith("1") else three_masters).flushall()
                else:
                    standalone.client().flushall()
                rate, cpu = drain(
                    url, cluster=cluster, jobs=options.jobs, concurrency=options.concurrency, partitions=partitions, tree=tree
                )
                rates[name].append(rate)
                cpus[name].append(cpu)
                load = os.getloadavg()[0]
                print(f"round {round_number + 1}: {name}: {rate:,.0f} jobs/s, worker CPU {cpu:.1f} us/job (load {load:.1f})", flush=True)
    finally:
        for server in (standalone, one_master, three_masters):
            server.stop()
    base = statistics.median(rates["standalone"])
    base_cpu = statistics.median(cpus["standalone"])
    for name, values in rates.items():
        median = statistics.median(values)
        cpu = statistics.median(cpus[name])
        print(
            f"{name}: median {median:,.0f} jobs/s ({median / base:.0%} of standalone), "
            f"worker CPU {cpu:.1f} us/job ({cpu / base_cpu:.0%} of standalone)"
        )


if __name__ == "__main__":
    main()
