"""(a) Jobs Ruby's ``Sidekiq::Client.push`` enqueues are run by our ``runworkers``.

Given a real ``manage.py runworkers`` process that knows the job classes in tests/interop/jobs.py,
when Ruby pushes items naming them (by dotted path or by a Ruby-style ``class_name``, now or with
``at``), then our worker runs them with Ruby's jid and arguments; a class it does not know is
refused with a clear error Ruby can read.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.interop.conftest import WORKER_SETTINGS
from tests.interop.jobs import RUNS_KEY
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.interop


def python_runs(redis) -> dict[str, dict]:
    return {run["jid"]: run for run in (json.loads(raw) for raw in redis.lrange(RUNS_KEY, 0, -1))}


@pytest.fixture
def worker(redis_server):
    with WorkerProcess(
        ["-q", "critical", "-q", "default", "-c", "2", "-t", "5"], env=WORKER_SETTINGS, redis_url=redis_server.url
    ) as process:
        yield process


def test_ruby_push_of_python_class_runs_in_our_worker(worker, ruby, redis):
    # When Ruby's client pushes a job naming a registered Python class by its dotted path
    jid = ruby.push({"class": "tests.interop.jobs.RecordRun", "args": ["from ruby", 7, {"list": [1, 2.5, None]}]})
    # Then our worker runs it, with Ruby's jid, arguments and payload fields
    run = wait_until(lambda: python_runs(redis).get(jid), message=f"our worker ran {jid}")
    assert run["args"] == ["from ruby", 7, {"list": [1, 2.5, None]}]
    assert run["queue"] == "default"
    assert isinstance(run["item"]["created_at"], float) and isinstance(run["item"]["enqueued_at"], float)
    assert run["item"]["retry"] is True
    # And Ruby's own API counts it as processed, with nothing left behind
    wait_until(lambda: ruby.inspect()["stats"]["processed"] == 1, message="Ruby's Stats#processed is 1")
    assert redis.llen("queue:default") == 0


def test_ruby_push_with_ruby_style_name_and_queue(worker, ruby, redis):
    jid = ruby.push({"class": "Interop::PythonReport", "args": [1], "queue": "critical"})
    run = wait_until(lambda: python_runs(redis).get(jid), message=f"our worker ran {jid}")
    assert run["class"] == "Interop::PythonReport"
    assert run["queue"] == "critical"


def test_ruby_scheduled_push_is_moved_by_our_scheduler(worker, ruby, redis):
    # When Ruby schedules a job 1.5 s ahead (Sidekiq::Client.push with "at")
    due = time.time() + 1.5
    jid = ruby.push({"class": "tests.interop.jobs.RecordRun", "args": ["scheduled"], "at": due})
    assert redis.zcard("schedule") == 1
    # Then our scheduler moves it when due and our worker runs it, not before
    run = wait_until(lambda: python_runs(redis).get(jid), message=f"our worker ran {jid}")
    assert due <= run["ran_at"] < due + 5
    assert redis.zcard("schedule") == 0


def test_ruby_push_of_unknown_class_is_refused_readably(worker, ruby, redis):
    # When Ruby pushes a job naming a class our worker does not know
    jid = ruby.push({"class": "os.system", "args": ["echo pwned"]})
    # Then nothing runs it, and the retry set holds it (as Sidekiq retries its NameError) with an error Ruby's API reads
    wait_until(lambda: redis.zcard("dead") == 1 or redis.zcard("retry") == 1, message="the job was refused")
    view = ruby.inspect()
    [entry] = view["dead"] + view["retries"]
    assert entry["jid"] == jid
    assert "not a registered job class" in entry["error_message"]
    assert python_runs(redis) == {}
