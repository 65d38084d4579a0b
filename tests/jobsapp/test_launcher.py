"""The launcher's steps (connect, build, serve, shutdown) in-process, without a subprocess."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import threading
from pathlib import Path

from jobsapp import chains, keys, middleware, scripts
from jobsapp.connection import get_redis
from jobsapp.periodic import PeriodicScheduler
from jobsapp.worker.launcher import WorkerOptions, WorkerProcess, prepare_children, wait_for_redis
from jobsapp.worker.recovery import Sweeper
from tests.manual_clock import ManualClock
from tests.redis_down import unreachable_redis
from tests.testapp.jobs import RAN_KEY, Noop, Record
from tests.workers import wait_until


def gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_connect_claims_the_slot_and_takes_back_its_dead_occupants_jobs_at_once(redis):
    # Given slot 0 on this host last held by a process that is gone, with a job in flight
    previous = f"{socket.gethostname()}:{gone_pid()}:aaaaaaaaaaaa"
    redis.set(keys.slot(socket.gethostname(), 0), previous)
    raw = json.dumps({"class": Noop.wire_name(), "args": [], "queue": "default", "jid": "a" * 24})
    redis.lpush(keys.inflight(previous), raw)
    process = WorkerProcess(WorkerOptions(), slot_number=0)
    # When the process connects
    assert process.connect(get_redis())
    # Then it holds the slot, and the predecessor's job is back on its queue
    assert redis.get(keys.slot(socket.gethostname(), 0)).decode() == process.identity
    assert redis.llen(keys.inflight(previous)) == 0
    assert json.loads(redis.rpop(keys.queue("default")))["jid"] == "a" * 24


def test_build_starts_nothing_and_basic_fetch_has_no_sweeper(redis):
    before = set(threading.enumerate())
    # When a basic-fetch and a reliable-fetch process build their components
    basic = WorkerProcess(WorkerOptions(fetch="basic")).build(get_redis())
    reliable = WorkerProcess(WorkerOptions(fetch="reliable")).build(get_redis())
    # Then only reliable fetch sweeps orphans, neither runs periodic jobs (none defined), and nothing is in Redis yet
    assert basic.sweeper is None and isinstance(reliable.sweeper, Sweeper)
    assert basic.periodic is None and not any(isinstance(part, PeriodicScheduler) for part in reliable.background())
    assert [part.thread_name for part in reliable.background()] == ["scheduler", "sweeper", "outbox_relay"]  # OUTBOX is on by default
    assert redis.scard(keys.PROCESSES) == 0
    assert set(threading.enumerate()) - before == set()


def test_serve_runs_jobs_until_term_and_shutdown_leaves_no_trace(redis, caplog):
    # Given a process that connected and built its components
    caplog.set_level(logging.INFO, logger="jobsapp.launcher")
    process = WorkerProcess(WorkerOptions(concurrency=2, timeout_seconds=5))
    client = get_redis()
    assert process.connect(client)
    components = process.build(client)
    # When it serves, and a job is pushed
    server = threading.Thread(target=process.serve, args=(components,))
    server.start()
    try:
        Record.perform_async("served")
        # Then the job runs and the process is listed
        wait_until(lambda: redis.lrange(RAN_KEY, 0, -1) == [b"served"], message="the job ran")
        assert redis.sismember(keys.PROCESSES, process.identity)
    finally:
        # When TERM arrives
        process.on_signal("TERM")
        server.join(10)
    assert not server.is_alive()
    process.shutdown(components)
    # Then it left the processes set, its keys and the in-flight index, and said what it did
    assert not redis.sismember(keys.PROCESSES, process.identity)
    assert not redis.exists(keys.process(process.identity), keys.inflight(process.identity))
    assert not redis.sismember(keys.INFLIGHT_INDEX, process.identity)
    messages = [record.getMessage() for record in caplog.records if record.name == "jobsapp.launcher"]
    assert any(message.startswith(f"process {process.identity} started") for message in messages)
    assert "stopped: 1 jobs processed (0 failed), 0 put back unfinished" in messages


def test_waiting_for_redis_warns_once_and_gives_up_when_stopped(caplog):
    # Given a Redis that does not answer, and a start-up waiting for it on a manual clock
    caplog.set_level(logging.INFO, logger="jobsapp.launcher")
    clock = ManualClock()
    stop = threading.Event()
    outcome: list[bool] = []
    waiter = threading.Thread(target=lambda: outcome.append(wait_for_redis(unreachable_redis(), stop, clock=clock)))
    waiter.start()
    try:
        # When three attempts fail
        clock.settle(1)
        clock.advance_and_settle(clock.waits[-1])
        clock.advance_and_settle(clock.waits[-1])
    finally:
        # And TERM arrives
        stop.set()
        waiter.join(5)
    # Then it backed off 0.1, 0.2, 0.4 s (with jitter), said once what it waits for, and gave up
    for delay, nominal in zip(clock.waits, [0.1, 0.2, 0.4], strict=True):
        assert nominal * 0.8 <= delay <= nominal * 1.2
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1 and messages[0].startswith("start: waiting for Redis at redis://"), messages
    assert outcome == [False]


def test_waiting_for_a_redis_that_answers_returns_at_once_and_says_nothing(caplog):
    caplog.set_level(logging.INFO, logger="jobsapp.launcher")
    clock = ManualClock()
    assert wait_for_redis(get_redis(), threading.Event(), clock=clock)
    assert clock.waits == [] and caplog.records == []


def test_the_parent_prepares_before_forking_what_each_child_would_import_and_read(settings, monkeypatch):
    # Given a project with server middleware, and neither chains nor scripts loaded yet in this process
    settings.JOBSAPP = {**settings.JOBSAPP, "SERVER_MIDDLEWARE": ["tests.testapp.jobs.RecordsChain"]}
    middleware.reset_chains()
    monkeypatch.setattr(scripts, "_runners", {})
    scripts.source.cache_clear()
    try:
        # When the -P parent prepares its children
        prepare_children()

        # Then a child reads no Lua file and imports no middleware on its way to its first job
        def refuse(*args, **kwargs):
            raise AssertionError("read or imported after the fork")

        monkeypatch.setattr(Path, "read_text", refuse)
        monkeypatch.setattr(chains, "import_string", refuse)
        assert [cls.__name__ for cls in middleware.server_chain().classes()] == ["RecordsChain"]
        assert all(scripts.script(path.stem).source for path in scripts.LUA_DIRECTORY.glob("*.lua"))
    finally:
        middleware.reset_chains()
