"""The transactional outbox under faults (issue 31), with real processes: producers (the web's
transactions, ``tests/faults/outbox_producer.py``), ``runworkers`` with the relay, a Redis killed
and restarted. Every transaction writes a business row (a ``User``) and pushes a ledger job in it;
a job is lost when its row committed and it is in no place at all (``tests/faults/ledger.py``).

Runs on the test database: a SQLite file, or PostgreSQL when ``$DATABASE_URL`` points at one
(.ci/run runs this file on both).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.faults.conftest import FAST_LIVENESS
from tests.faults.jobs import ATTEMPTS
from tests.faults.ledger import check
from tests.redis_server import RedisServer
from tests.workers import ROOT_DIR, WorkerProcess, wait_until, worker_database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

#: A relay that takes an entry one second after its commit, and replaces a dead relay in 3 s.
OUTBOX = {"OUTBOX": True, "OUTBOX_GRACE_SECONDS": 1.0, "OUTBOX_RELAY_LOCK_SECONDS": 3.0}
#: Where no Redis listens: a producer pointed there finds Redis down at every commit.
DEAD_REDIS = "redis://127.0.0.1:1/0"
#: A queue no job is pushed to: a worker listening there only relays.
IDLE_QUEUE = "outbox-idle"


@pytest.fixture
def engine() -> Iterator[RedisServer]:
    """The engine's Redis for one test, ours to kill and restart."""
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def produce(engine: RedisServer, ledger_server: RedisServer) -> Callable[..., subprocess.Popen[str]]:
    """``produce(prefix, count, mode="commit", redis_url=None, env=None)``: a started producer."""
    database_url = worker_database_url()

    def start(
        prefix: str,
        count: int,
        *,
        mode: str = "commit",
        redis_url: str | None = None,
        env: dict[str, str] | None = None,
        pause: float = 0.0,
    ) -> subprocess.Popen[str]:
        process_env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.faults.settings",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url or engine.url,
            "LEDGER_REDIS_URL": ledger_server.url,
            "JOBSAPP_TEST_OVERRIDES": json.dumps({"OUTBOX": True}),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        command = [sys.executable, "-m", "tests.faults.outbox_producer", prefix, str(count), mode, str(pause)]
        return subprocess.Popen(command, cwd=ROOT_DIR, env=process_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    return start


def finish(producer: subprocess.Popen[str], *, timeout_seconds: float = 120) -> tuple[int, str]:
    output, _ = producer.communicate(timeout=timeout_seconds)
    return producer.returncode, output


def committed_ids(prefix: str) -> list[str]:
    """The business rows that committed: the jobs that must run."""
    from django.contrib.auth.models import User

    return sorted(User.objects.filter(username__startswith=f"{prefix}-").values_list("username", flat=True))


def outbox_depth() -> int:
    from jobsapp.models import OutboxEntry

    return OutboxEntry.objects.count()


def workers(
    start_worker: Callable[..., WorkerProcess], engine: RedisServer, *, relay: bool, queue: str = "default", **extra: Any
) -> WorkerProcess:
    overrides = {**FAST_LIVENESS, **(OUTBOX if relay else {"OUTBOX": False}), **extra.pop("overrides", {})}
    env = {"DATABASE_URL": worker_database_url(), **extra.pop("env", {})}
    return start_worker(["-q", queue, "-c", "5", "-t", "2"], overrides=overrides, env=env, redis_url=engine.url)


def pushed_by(worker: WorkerProcess) -> int:
    return sum(int(count) for count in re.findall(r"outbox relay: (\d+) pushed", worker.output))


def test_redis_down_at_commit_loses_nothing_and_the_requests_answer_normally(engine, ledger, produce, start_worker, measure):
    from django.db import connection

    # Given a worker with the relay, and Redis down
    worker = workers(start_worker, engine, relay=True)
    engine.kill()
    # When 100 transactions each commit a row and push a job
    code, output = finish(produce("down", 100))
    # Then every one of them answered normally, and the jobs wait in the outbox
    assert code == 0, output
    assert output.count("committed ") == 100 and "raised" not in output, output
    assert outbox_depth() == 100
    # When Redis comes back, Then the relay pushes them all, and they run
    engine.start()
    back = time.monotonic()
    wait_until(lambda: outbox_depth() == 0, timeout_seconds=60, interval_seconds=0.1, message="the outbox emptied")
    pushed_seconds = time.monotonic() - back
    ids = committed_ids("down")
    wait_until(lambda: not check(engine.client(), ledger, ids).never_ran, timeout_seconds=60, interval_seconds=0.2, message="every job ran")
    worker.stop()
    report = check(engine.client(), ledger, ids)
    measure(
        f"outbox: Redis down at commit ({connection.vendor})",
        transactions=100,
        committed=len(ids),
        lost=len(report.lost),
        duplicates=report.duplicates,
        pushed_seconds_after_redis_back=round(pushed_seconds, 2),
    )
    assert len(ids) == 100
    report.assert_clean()


def test_a_producer_killed_right_after_commit_loses_nothing(engine, ledger, produce, start_worker, measure):
    from django.db import connection

    # Given a worker with the relay
    worker = workers(start_worker, engine, relay=True)
    # When producers die right after a COMMIT, before their push (three at a fault point, the
    # fourth SIGKILLed at a moment of the test's choosing)
    for round_number, after in enumerate((1, 4, 7)):
        env = {"JOBSAPP_FAULT_POINT": "outbox_committed", "JOBSAPP_FAULT_AFTER": str(after)}
        code, output = finish(produce(f"kill{round_number}", 10, env=env))
        assert code == 86, output
    killed = produce("sigkill", 400, pause=0.005)
    wait_until(lambda: len(committed_ids("sigkill")) >= 50, timeout_seconds=60, message="the producer committed 50 transactions")
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=30)
    # Then every job whose row committed runs, the ones killed before their push included
    ids = [*committed_ids("kill0"), *committed_ids("kill1"), *committed_ids("kill2"), *committed_ids("sigkill")]
    wait_until(lambda: outbox_depth() == 0, timeout_seconds=60, interval_seconds=0.1, message="the outbox emptied")
    wait_until(lambda: not check(engine.client(), ledger, ids).never_ran, timeout_seconds=60, interval_seconds=0.2, message="every job ran")
    worker.stop()
    report = check(engine.client(), ledger, ids)
    relayed = pushed_by(worker)
    measure(
        f"outbox: producer killed after COMMIT ({connection.vendor})",
        committed=len(ids),
        relayed=relayed,
        lost=len(report.lost),
        duplicates=report.duplicates,
    )
    assert [len(committed_ids(f"kill{number}")) for number in range(3)] == [1, 4, 7]
    assert relayed >= 3  # the three jobs killed between their COMMIT and their push
    report.assert_clean()
    # And no job ran whose row did not commit
    ran = {key.decode() for key in ledger.hkeys(ATTEMPTS)}
    assert ran <= set(ids)


def test_a_payload_redis_refuses_is_parked_with_its_reason_and_never_retried(ledger, ledger_server, start_worker, measure):
    from django.db import connection

    from jobsapp.models import OutboxEntry

    # Given a Redis that refuses any value over 1 MB, and producers allowed 4 MB payloads
    server = RedisServer(extra_args=["--proto-max-bulk-len", "1mb"]).start()
    try:
        worker = workers(start_worker, server, relay=True, overrides={"MAX_PAYLOAD_BYTES": 4 * 1024 * 1024})
        big = {"JOBSAPP_TEST_OVERRIDES": json.dumps({"OUTBOX": True, "MAX_PAYLOAD_BYTES": 4 * 1024 * 1024})}
        producer = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.outbox_producer", "big", "10", "big"],
            cwd=ROOT_DIR, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.faults.settings", "DATABASE_URL": worker_database_url(),
                 "REDIS_URL": server.url, "LEDGER_REDIS_URL": ledger_server.url, **big},
        )  # fmt: skip
        # When 10 transactions commit, every other one with a 2 MB job
        code, output = finish(producer)
        assert code == 0 and output.count("committed ") == 10 and "raised" not in output, output
        small = [f"big-{index}" for index in range(0, 10, 2)]
        wait_until(lambda: not check(server.client(), ledger, small).never_ran, timeout_seconds=30, message="the small jobs ran")
        wait_until(lambda: outbox_depth() == 5, timeout_seconds=30, interval_seconds=0.1, message="the pushed entries deleted")
        waiting = OutboxEntry.objects.filter(parked_at__isnull=True)
        wait_until(lambda: not waiting.exists(), timeout_seconds=30, interval_seconds=0.2, message="every big entry parked")
        tries = sorted(OutboxEntry.objects.values_list("attempts", flat=True))
        time.sleep(float(OUTBOX["OUTBOX_GRACE_SECONDS"]) + 2.0)  # more rounds of the relay
        worker.stop()
        parked = list(OutboxEntry.objects.order_by("jid").values_list("parked_at", "attempts", "reason"))
        measure(f"outbox: payloads Redis refuses ({connection.vendor})", transactions=10, parked=len(parked), relay_tries=tries)
        # Then the small jobs ran, and the big ones are parked with Redis's reason: at commit, or by
        # the relay (when Redis cut the connection instead of answering, after at most 3 tries)
        assert len(parked) == 5, parked
        assert all(attempts <= 3 for _, attempts, _ in parked), parked
        assert all("invalid bulk length" in reason or "tries while Redis answered" in reason for _, _, reason in parked), parked
        # And no parked entry is tried again, however many rounds pass
        assert sorted(attempts for _, attempts, _ in parked) == tries
        ran = {key.decode() for key in ledger.hkeys(ATTEMPTS)}
        assert ran == set(small)
    finally:
        server.stop()


def fill_outbox(produce, prefix: str, count: int) -> list[str]:
    """``count`` committed transactions whose pushes all found Redis down: entries left."""
    code, output = finish(produce(prefix, count, redis_url=DEAD_REDIS))
    assert code == 0 and output.count("committed ") == count, output
    assert outbox_depth() == count
    return committed_ids(prefix)


def test_a_relay_killed_mid_batch_loses_nothing_and_its_duplicates_are_counted(engine, ledger, produce, start_worker, measure):
    from django.db import connection

    # Given 300 committed jobs left in the outbox, and a worker that runs jobs (no relay)
    ids = fill_outbox(produce, "relaykill", 300)
    runner = workers(start_worker, engine, relay=False)
    # When a relay dies in the middle of its second batch, between a push and its DELETE
    env = {"JOBSAPP_FAULT_POINT": "outbox_relay_pushed", "JOBSAPP_FAULT_AFTER": "150"}
    first = workers(start_worker, engine, relay=True, queue=IDLE_QUEUE, env=env)
    assert first.process is not None
    first.process.wait(timeout=60)
    left = outbox_depth()
    # And another relay takes over once the dead one's lock expires
    second = workers(start_worker, engine, relay=True, queue=IDLE_QUEUE)
    wait_until(lambda: outbox_depth() == 0, timeout_seconds=60, interval_seconds=0.1, message="the outbox emptied")
    wait_until(lambda: not check(engine.client(), ledger, ids).never_ran, timeout_seconds=60, interval_seconds=0.2, message="every job ran")
    time.sleep(0.5)  # a late duplicate gets its chance to be counted
    second.stop()
    runner.stop()
    report = check(engine.client(), ledger, ids)
    measure(
        f"outbox: relay killed mid-batch ({connection.vendor})",
        entries=300,
        left_by_the_dead_relay=left,
        lost=len(report.lost),
        duplicates=report.duplicates,
    )
    # Then nothing is lost, and the one entry pushed but not deleted ran twice
    assert first.process.returncode == 86
    assert left == 300 - 149
    report.assert_clean()
    assert report.duplicates == 1


def test_two_relays_racing_push_each_entry_once(engine, ledger, produce, start_worker, measure):
    from django.db import connection

    # Given 300 committed jobs left in the outbox, and a worker that runs jobs
    ids = fill_outbox(produce, "race", 300)
    runner = workers(start_worker, engine, relay=False)
    # When two relays start together
    relays = [workers(start_worker, engine, relay=True, queue=IDLE_QUEUE) for _ in range(2)]
    wait_until(lambda: outbox_depth() == 0, timeout_seconds=60, interval_seconds=0.1, message="the outbox emptied")
    wait_until(lambda: not check(engine.client(), ledger, ids).never_ran, timeout_seconds=60, interval_seconds=0.2, message="every job ran")
    time.sleep(0.5)  # a late duplicate gets its chance to be counted
    for relay in relays:
        relay.stop()
    runner.stop()
    report = check(engine.client(), ledger, ids)
    counts = [pushed_by(relay) for relay in relays]
    measure(
        f"outbox: two relays racing ({connection.vendor})",
        entries=300,
        pushed_by_each=counts,
        lost=len(report.lost),
        duplicates=report.duplicates,
    )
    # Then each entry was pushed once, by one relay or the other, and ran once
    assert sum(counts) == 300
    report.assert_clean()
    assert report.duplicates == 0


def test_rollbacks_push_nothing(engine, ledger, produce, start_worker, measure):
    from django.db import connection

    # Given a worker with the relay
    worker = workers(start_worker, engine, relay=True)
    # When 100 transactions push a job and roll back, then one commits
    code, output = finish(produce("rollback", 100, mode="rollback"))
    assert code == 0 and output.count("rolled back ") == 100, output
    time.sleep(float(OUTBOX["OUTBOX_GRACE_SECONDS"]) + 1.0)  # past the grace: a relay round had its chance
    code, output = finish(produce("control", 1))
    assert code == 0, output
    wait_until(
        lambda: check(engine.client(), ledger, ["control-0"]).done.get("control-0"), timeout_seconds=30, message="the committed job ran"
    )
    wait_until(lambda: outbox_depth() == 0, timeout_seconds=30, interval_seconds=0.1, message="the relay deleted the pushed entry")
    worker.stop()
    # Then none of the rolled back jobs was pushed or ran, and nothing is left anywhere
    ran = {key.decode() for key in ledger.hkeys(ATTEMPTS)}
    measure(f"outbox: rollbacks ({connection.vendor})", transactions=100, pushed=len(ran - {"control-0"}))
    assert ran == {"control-0"}
    assert committed_ids("rollback") == []
    assert outbox_depth() == 0
    assert engine.client().llen("queue:default") == 0
