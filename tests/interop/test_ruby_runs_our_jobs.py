"""(b) Jobs our client enqueues are run by a real Ruby Sidekiq 6.4 process.

Given a ``sidekiq -r ruby/worker.rb -q default -c 2`` process whose HardWorker records each run,
when Python enqueues for "HardWorker" (raw ``client.push``, a Python class with
``class_name="HardWorker"``, ``perform_in``), then Ruby runs it; and a job Ruby fails lands in the
retry set with Sidekiq's error fields, as ``jobsapp.api`` reads them.
"""

from __future__ import annotations

import json
import time

import pytest

from jobsapp import api, client
from tests.testapp.jobs import HardWorker
from tests.workers import wait_until

pytestmark = pytest.mark.interop

RUNS_KEY = "interop:ruby:runs"  # written by HardWorker in ruby/worker.rb


def ruby_runs(redis) -> dict[str, dict]:
    return {run["jid"]: run for run in (json.loads(raw) for raw in redis.lrange(RUNS_KEY, 0, -1))}


def wait_for_ruby_run(redis, jid: str, timeout_seconds: float = 10.0) -> dict:
    return wait_until(lambda: ruby_runs(redis).get(jid), timeout_seconds=timeout_seconds, message=f"Ruby's HardWorker ran {jid}")


def test_raw_client_push_is_run_by_ruby(ruby_sidekiq, redis):
    # When Python pushes a raw Sidekiq item naming the Ruby class
    jid = client.push({"class": "HardWorker", "args": ["from python", 1, {"nested": [True, None]}]})
    # Then Ruby's HardWorker runs it with the same jid and arguments
    run = wait_for_ruby_run(redis, jid)
    assert run["class"] == "HardWorker"
    assert run["args"] == ["from python", 1, {"nested": [True, None]}]
    assert redis.llen("queue:default") == 0


def test_python_class_with_ruby_wire_name_is_run_by_ruby(ruby_sidekiq, redis):
    # Given a Python job declared with sidekiq_options(class_name="HardWorker")
    assert HardWorker.wire_name() == "HardWorker"
    # When it is enqueued the Python way
    jid = HardWorker.perform_async("bob", 5)
    # Then Ruby runs it
    assert wait_for_ruby_run(redis, jid)["args"] == ["bob", 5]


def test_bulk_push_is_run_by_ruby(ruby_sidekiq, redis):
    jids = client.push_bulk({"class": "HardWorker", "args": [["bulk", number] for number in range(20)]})
    wait_until(lambda: set(jids) <= set(ruby_runs(redis)), message="Ruby ran all 20 bulk jobs")
    assert sorted(ruby_runs(redis)[jid]["args"][1] for jid in jids) == list(range(20))


def test_perform_in_is_moved_by_ruby_scheduler_and_run(ruby_sidekiq, redis):
    # When Python schedules a job two seconds ahead
    enqueued = time.time()
    jid = HardWorker.perform_in(2, "later", 3)
    assert redis.zcard("schedule") == 1 and redis.llen("queue:default") == 0
    # Then Ruby's own scheduler moves it to the queue when due, and Ruby runs it, not before
    run = wait_for_ruby_run(redis, jid, timeout_seconds=15)
    assert run["args"] == ["later", 3]
    assert run["ran_at"] >= enqueued + 2
    assert redis.zcard("schedule") == 0


def test_ruby_failure_lands_in_our_retry_set_view_with_error_fields(ruby_sidekiq, redis):
    # When a job pushed by Python fails in Ruby
    before = time.time()
    jid = client.push({"class": "HardWorker", "args": ["fail"], "backtrace": True, "tracking_id": "t-1"})
    wait_until(lambda: redis.zcard("retry") == 1, message="the failed job is in the retry set")
    # Then our api.RetrySet reads it with the error fields Sidekiq wrote
    entry = api.RetrySet().find_job(jid)
    assert entry is not None and entry.klass == "HardWorker" and entry.args == ["fail"]
    assert entry.error_class == "ArgumentError"
    assert entry.error_message == 'HardWorker was told to fail: ["fail"]'
    assert entry.retry_count == 0
    assert before <= entry.failed_at <= time.time()
    assert entry.score >= entry.failed_at + 15  # Sidekiq's backoff: 0**4 + 15 + rand(10) * 1
    assert entry.item["tracking_id"] == "t-1"  # unknown keys survive Ruby's hop
    # And the backtrace Ruby compressed decompresses to Ruby's lines
    assert any("worker.rb" in line and "perform" in line for line in entry.error_backtrace)
    assert api.Stats.fetch().retry_size == 1
