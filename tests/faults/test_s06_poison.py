"""Scenario 6: poison among innocent jobs.

Given a queue where innocent ledger jobs are interleaved with malformed JSON, unknown and hostile
class names, a job that segfaults its process and a job that asks for 64 TiB, When a supervised
worker (``-P 1``) drains it, Then every bad job is in the dead set with a reason, nothing a
payload named was imported, the process keeps (or is restarted) working, and every innocent job
ran.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import DONE, LedgerJob, MemoryHogJob, SegfaultJob
from tests.faults.ledger import check
from tests.workers import wait_until

pytestmark = pytest.mark.slow

MALFORMED = [
    b"{not json",
    b"\xff\xfe binary",
    b"[]",
    b'"just a string"',
    b'{"class": 5, "args": []}',
    b'{"class": "tests.faults.jobs.LedgerJob", "args": "not a list"}',
    b"",
]
HOSTILE_CLASSES = [
    "NoSuchJob",
    "os.system",
    "builtins.eval",
    "subprocess.Popen",
    "__import__('os').system('touch /tmp/jobsapp-pwned')",
    "../../etc/passwd",
    "tests.faults.sentinel.Boom",
    "jobsapp.management.commands.runworkers.Command",
    "",
]
#: Of HOSTILE_CLASSES, the names no class could have: dead at once. The others are well-formed
#: names of classes this worker does not know: retried, as Sidekiq retries its NameError.
NOT_CLASS_NAMES = {"__import__('os').system('touch /tmp/jobsapp-pwned')", "../../etc/passwd", ""}


def test_poison_goes_dead_and_innocents_run(redis_server, redis, ledger, start_worker, measure):
    innocents = [f"s6-ok-{index}" for index in range(200)]
    # Given poison spread among innocent jobs
    for index, ledger_id in enumerate(innocents):
        LedgerJob.perform_async(ledger_id, 10)
        if index % 20 == 5 and MALFORMED:
            redis.lpush("queue:default", MALFORMED[index // 20 % len(MALFORMED)])
        if index % 20 == 10:
            name = HOSTILE_CLASSES[index // 20 % len(HOSTILE_CLASSES)]
            redis.lpush("queue:default", json.dumps({"class": name, "args": [f"s6-hostile-{index}"], "jid": f"{index:024x}"}))
    for raw in MALFORMED:
        redis.lpush("queue:default", raw)
    for name in HOSTILE_CLASSES:
        redis.lpush("queue:default", json.dumps({"class": name, "args": ["s6-hostile"], "queue": "default", "jid": "f" * 24}))
    segfault_jid = SegfaultJob.perform_async("s6-segfault")
    hog_jid = MemoryHogJob.perform_async("s6-hog")
    for ledger_id in innocents[:20]:  # more innocents right behind the crasher
        LedgerJob.perform_async(f"{ledger_id}-late", 10)
    late = [f"{ledger_id}-late" for ledger_id in innocents[:20]]
    poison_count = redis.llen("queue:default") - len(innocents) - len(late)
    pushed_names = [HOSTILE_CLASSES[index // 20 % len(HOSTILE_CLASSES)] for index in range(200) if index % 20 == 10] + HOSTILE_CLASSES
    unknown_count = sum(1 for name in pushed_names if name not in NOT_CLASS_NAMES)
    dead_count = poison_count - unknown_count
    # When a supervised worker drains it
    started = time.monotonic()
    worker = start_worker(["-P", "2", "-c", "4", "-t", "2"], overrides=FAST_LIVENESS)
    wait_until(lambda: redis.zcard("dead") >= dead_count, timeout_seconds=60, message="every poison job is dead")
    try:
        wait_until(lambda: ledger.hlen(DONE) >= len(innocents) + len(late), timeout_seconds=60, message="every innocent ran")
    except AssertionError:
        stuck = check(redis, ledger, [*innocents, *late])
        owners = {
            key.decode(): (redis.llen(key), redis.exists(key.decode().removeprefix("jobsapp:inflight:")))
            for key in redis.scan_iter(match="jobsapp:inflight:*")
        }
        print("IN FLIGHT (length, heartbeat alive):", owners, "SWEEP LOCK", redis.pttl("jobsapp:lock:sweep"))
        import subprocess

        print(subprocess.run(["ps", "-o", "pid,stat,etime,cmd", "--ppid", str(worker.pid)], capture_output=True, text=True).stdout)
        print("\n".join(line for line in worker.output.splitlines() if "exited" in line or "recovered" in line or "Fatal" in line))
        raise AssertionError(
            f"{stuck.summary()}; not done: {[(k, v) for k, v in stuck.places.items() if v != ['done']][:10]}\n{worker.output[-3000:]}"
        ) from None
    # And the process still works after all that
    LedgerJob.perform_async("s6-after", 0)
    wait_until(lambda: ledger.hget(DONE, "s6-after"), timeout_seconds=20, message="a job enqueued afterwards ran")
    elapsed = time.monotonic() - started
    assert worker.process is not None and worker.process.poll() is None
    worker.stop()
    # Then every innocent job is done, and nowhere else
    report = check(redis, ledger, [*innocents, *late, "s6-after"])
    dead = [json.loads(raw) for raw in redis.zrange("dead", 0, -1)]
    measure(
        "6 poison",
        innocents=len(report.places),
        poison=poison_count,
        unknown_retried=unknown_count,
        dead=len(dead),
        innocents_lost=len(report.lost),
        innocents_dead=report.count("dead"),
        seconds=elapsed,
    )
    report.assert_clean()
    # And each bad job is in the dead set once, with a reason
    assert len(dead) == dead_count
    without_reason = [entry for entry in dead if not (entry.get("error_class") and entry.get("error_message"))]
    assert not without_reason
    by_jid = {entry["jid"]: entry for entry in dead}
    assert by_jid[segfault_jid]["error_class"] == "jobsapp.errors.PoisonJob"
    assert "recovered from 3 dead processes" in by_jid[segfault_jid]["error_message"]
    assert by_jid[hog_jid]["error_class"] == "MemoryError"
    malformed = [entry for entry in dead if entry["class"] == "jobsapp.MalformedPayload"]
    assert len(malformed) == len(MALFORMED) + sum(1 for index in range(200) if index % 20 == 5)
    unknown = [entry for entry in dead if entry.get("error_class") == "jobsapp.errors.UnknownJobClass"]
    assert {entry["class"] for entry in unknown} == NOT_CLASS_NAMES
    # And each unknown but well-formed class waits for a retry (or is back on its queue for one)
    waiting = [json.loads(raw) for raw in [*redis.zrange("retry", 0, -1), *redis.lrange("queue:default", 0, -1)]]
    retried = [entry for entry in waiting if entry.get("error_class") == "jobsapp.errors.UnknownJobClass"]
    assert len(retried) == unknown_count
    assert {entry["class"] for entry in retried} == set(HOSTILE_CLASSES) - NOT_CLASS_NAMES
    assert all("jobs.py" in entry["error_message"] for entry in retried)
    # And nothing a payload named was imported
    assert not ledger.exists("ledger:sentinel-imported")  # tests/faults/sentinel.py, never imported here


def test_slow_innocents_running_beside_a_crasher_are_not_buried_with_it(redis_server, redis, ledger, start_worker, measure):
    # Given slow innocent jobs fetched in the same batch as a job that segfaults its process
    innocents = [f"s6-slow-{index}" for index in range(8)]
    LedgerJob.perform_bulk([[ledger_id, 400] for ledger_id in innocents[:4]])
    segfault_jid = SegfaultJob.perform_async("s6-crasher")
    LedgerJob.perform_bulk([[ledger_id, 400] for ledger_id in innocents[4:]])
    # When supervised processes (each restarted in its slot after a crash) run them ten at a time
    worker = start_worker(["-P", "2", "-c", "10", "-t", "2"], overrides=FAST_LIVENESS)
    wait_until(lambda: redis.zcard("dead") == 1, timeout_seconds=60, message="the crasher is dead")
    wait_until(lambda: ledger.hlen(DONE) == len(innocents), timeout_seconds=60, message="every innocent ran")
    worker.stop()
    # Then only the crasher is in the dead set: the innocents that were running beside it the
    # first time ran in quarantine afterwards, so later crashes were not blamed on them
    report = check(redis, ledger, innocents)
    dead = [json.loads(raw) for raw in redis.zrange("dead", 0, -1)]
    measure("6 crasher beside slow innocents", innocents=len(innocents), innocents_dead=report.count("dead"), crasher_dead=len(dead))
    report.assert_clean()
    assert [entry["jid"] for entry in dead] == [segfault_jid]
