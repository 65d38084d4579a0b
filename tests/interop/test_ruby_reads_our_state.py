"""(c) Ruby Sidekiq's API reads what our worker processes write, and Ruby's signals reach them.

Given a real ``manage.py runworkers`` process, when it runs, fails and kills jobs and while it is
busy, then ``Sidekiq::Stats``, ``RetrySet``, ``DeadSet``, ``ProcessSet`` and ``Workers`` (Ruby,
6.4.1) report the same counts, error fields (backtrace decompressed by Ruby), process details and
busy jobs; and ``Process#quiet!`` / ``#stop!`` sent from Ruby quiet and stop our process.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from tests.interop.conftest import WORKER_SETTINGS
from tests.interop.jobs import RELEASE_KEY, AlwaysFails, AwaitsRelease, Blocks, DiesAtOnce, RecordRun
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.interop


def test_ruby_reads_our_counts_and_failures(redis_server, ruby, redis):
    with WorkerProcess(["-c", "3", "-t", "5"], env=WORKER_SETTINGS, redis_url=redis_server.url):
        # When our worker runs three jobs, fails one (retry) and kills one (retry: 0)
        for number in range(3):
            RecordRun.perform_async(number)
        failed_jid = AlwaysFails.perform_async("on purpose")
        dead_jid = DiesAtOnce.perform_async("at once")
        # Then Ruby's Stats counts them (lifetime and today's, UTC)
        view = wait_until(
            lambda: (view := ruby.inspect())["stats"]["processed"] == 5 and view["stats"]["failed"] == 2 and view,
            message="Ruby's Stats shows 5 processed and 2 failed",
        )
    stats = view["stats"]
    assert (stats["retry_size"], stats["dead_size"], stats["enqueued"]) == (1, 1, 0)
    assert stats["history"] == {dt.datetime.now(dt.UTC).date().isoformat(): 5}
    # And Ruby's RetrySet reads the failure with Sidekiq's error fields and our backtrace
    [retry] = view["retries"]
    assert retry["jid"] == failed_jid and retry["class"] == "tests.interop.jobs.AlwaysFails"
    assert retry["error_class"] == "ValueError"
    assert retry["error_message"] == "python job failed on purpose: on purpose"
    assert retry["retry_count"] == 0 and retry["error?"] is True
    assert retry["failed_at"] <= time.time() and retry["score"] > retry["failed_at"] + 14
    assert any("tests/interop/jobs.py" in line for line in retry["error_backtrace"])
    # And Ruby's DeadSet reads the job that died at once
    [dead] = view["dead"]
    assert dead["jid"] == dead_jid
    assert (dead["error_class"], dead["error_message"]) == ("RuntimeError", "python job died on purpose: at once")


def test_ruby_reads_our_process_and_busy_jobs_and_quiets_it(redis_server, ruby, redis):
    with WorkerProcess(["-q", "default", "-c", "3", "-g", "interop", "-t", "5"], env=WORKER_SETTINGS, redis_url=redis_server.url) as worker:
        # Given our worker is busy with two jobs
        jids = {Blocks.perform_async("first"), Blocks.perform_async("second")}
        # (Ruby reads Workers, Stats and ProcessSet one after another: a heartbeat may land between them)
        view = wait_until(
            lambda: (
                len((view := ruby.inspect())["workers"]) == 2
                and view["stats"]["workers_size"] == 2
                and [process["busy"] for process in view["processes"]] == [2]
                and view
            ),
            message="Ruby's Workers and Stats list our two busy jobs",
        )
        # Then Ruby's ProcessSet lists our process as Sidekiq would
        [process] = view["processes"]
        assert process["identity"] == worker.identity
        assert process["pid"] == worker.pid
        assert process["tag"] == "interop"
        assert process["concurrency"] == 3
        assert process["queues"] == ["default"]
        assert process["busy"] == 2
        assert process["quiet"] == "false" and process["stopping?"] is False
        assert process["rss"] > 0 and process["beat"] > time.time() - 10
        assert view["stats"]["processes_size"] == 1 and view["stats"]["workers_size"] == 2
        # And Ruby's Workers shows each busy job with its payload
        assert {work["payload"]["jid"] for work in view["workers"]} == jids
        for work in view["workers"]:
            assert work["process_id"] == worker.identity
            assert work["queue"] == "default"
            assert work["payload"]["class"] == "tests.interop.jobs.Blocks"
            assert isinstance(work["run_at"], int) and work["run_at"] <= time.time()

        # When Ruby sends Process#quiet! (TSTP through <identity>-signals)
        ruby.signal("quiet", worker.identity)
        # Then our process reports itself quiet to Ruby and fetches nothing more
        wait_until(lambda: ruby.inspect()["processes"][0]["stopping?"], message="Ruby sees our process quiet")
        late_jid = RecordRun.perform_async("after quiet")
        redis.rpush(RELEASE_KEY, "go", "go")
        wait_until(lambda: len(ruby.inspect()["workers"]) == 0, message="the two busy jobs finished")
        time.sleep(1.5)
        assert worker.process.poll() is None  # quiet is not stop
        assert {queue["name"]: queue["jids"] for queue in ruby.inspect()["queues"]} == {"default": [late_jid]}


def test_ruby_stop_signal_stops_our_process(redis_server, ruby):
    with WorkerProcess(["-c", "2", "-t", "5"], env=WORKER_SETTINGS, redis_url=redis_server.url) as worker:
        # When Ruby sends Process#stop! (TERM through <identity>-signals)
        ruby.signal("stop", worker.identity)
        # Then our process shuts down on its own, cleanly, and leaves the ProcessSet
        assert worker.process.wait(timeout=15) == 0
        assert ruby.inspect()["processes"] == []


def test_ruby_lists_our_running_async_jobs_as_busy_workers(redis_server, ruby, redis):
    with WorkerProcess(["-q", "default", "-c", "1", "-t", "5"], env=WORKER_SETTINGS, redis_url=redis_server.url) as worker:
        # Given our one-thread worker awaiting three async jobs at once
        jids = {AwaitsRelease.perform_async(label) for label in ("a", "b", "c")}
        # Then Ruby's Workers lists each as a busy job of our process, and ProcessSet counts them
        view = wait_until(lambda: len((view := ruby.inspect())["workers"]) == 3 and view, message="Ruby's Workers lists 3 async jobs")
        assert {work["payload"]["jid"] for work in view["workers"]} == jids
        assert {work["process_id"] for work in view["workers"]} == {worker.identity}
        assert view["processes"][0]["busy"] == 3
        # And once released they finish and leave the list
        redis.rpush(RELEASE_KEY, "go", "go", "go")
        wait_until(lambda: not ruby.inspect()["workers"], message="Ruby's Workers is empty again")
