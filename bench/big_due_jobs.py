"""How long moving big due jobs holds Redis (run by hand, not a test):
``.venv/bin/python -m bench.big_due_jobs [--jobs 100] [--kilobytes 1000]``.

Starts its own throwaway redis-server, puts ``--jobs`` due jobs of ``--kilobytes`` each in the
schedule set (under the documented 1 MiB payload limit), and moves them with the scheduler while
a probe thread sends PING in a loop on its own connection. Prints the longest PING round trip
(how long any other client waited for Redis), the longest command in SLOWLOG, how many script
calls the move took and how long it took in all. Issue 14 measured 5.6 s of BUSY with the old
schedule_move.lua, which decoded and scanned every job in Lua, 100 per call.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"

from tests.redis_server import RedisServer  # noqa: E402

PROBE = """
import sys, threading, time, redis
client = redis.Redis.from_url(sys.argv[1])
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
longest = 0.0
count = 0
while not stop.is_set():
    started = time.perf_counter()
    client.ping()
    longest = max(longest, time.perf_counter() - started)
    count += 1
print(f"{longest * 1000:.1f} ms over {count} pings")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--kilobytes", type=int, default=1000)
    options = parser.parse_args()

    server = RedisServer().start()
    os.environ["REDIS_URL"] = server.url
    import django

    django.setup()
    from django.conf import settings

    settings.JOBSAPP = {**getattr(settings, "JOBSAPP", {}), "REDIS_URL": server.url}
    from jobsapp.connection import get_redis, reset
    from jobsapp.worker.scheduler import Scheduler

    reset()
    raw = server.client()
    try:
        due = time.time() - 1
        padding = "x" * (options.kilobytes * 1000)
        for index in range(options.jobs):
            member = json.dumps({"class": "Big", "args": [padding, index], "jid": f"{index:024x}", "queue": "big", "retry": True})
            raw.zadd("schedule", {member: due})
        raw.config_set("slowlog-log-slower-than", 0)
        raw.config_set("slowlog-max-len", 100_000)
        raw.slowlog_reset()
        raw.config_resetstat()

        # the probe runs in its own process, so this one's GIL (JSON work) cannot delay it
        probe = subprocess.Popen(
            [sys.executable, "-c", PROBE, server.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)
        started = time.perf_counter()
        moved, _ = Scheduler(client=get_redis(), poll_interval_seconds=1).enqueue_due()
        elapsed = time.perf_counter() - started
        time.sleep(0.2)
        probe_report, _ = probe.communicate("stop\n", timeout=30)
        entries = [entry for entry in raw.slowlog_get(100_000) if not str(entry["command"]).startswith(("b'PING", "PING"))]
        slowest = max(entries, key=lambda entry: entry["duration"])
        calls = raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
        print(f"jobs moved: {moved} of {options.jobs} x {options.kilobytes} KB in {elapsed:.2f} s, {calls} script calls")
        print(f"longest PING round trip meanwhile (separate process): {probe_report.strip()}")
        command = str(slowest["command"])[:30]
        print(f"longest command in SLOWLOG (PINGs left out): {slowest['duration'] / 1000:.2f} ms ({command}...)")
        scripts = sorted(entry["duration"] / 1000 for entry in entries if "EVALSHA" in str(entry["command"]).upper())
        if scripts:
            slowest_five = [round(ms, 1) for ms in scripts[-5:]]
            print(f"schedule_move.lua calls: median {scripts[len(scripts) // 2]:.2f} ms, slowest five {slowest_five}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
