"""Function jobs: @jobsapp.job on a plain function."""

from __future__ import annotations

import json

import pytest

import jobsapp
from jobsapp import registry, results, testing
from tests.testapp.tasks import multiply, record_call
from tests.workers import WorkerProcess, wait_until


def test_decorated_function_is_registered_under_its_dotted_path_and_still_callable():
    # Given a decorated module-level function, Then its wire name is its dotted path
    assert multiply.name == "tests.testapp.tasks.multiply"
    assert registry.lookup("tests.testapp.tasks.multiply") is multiply.job_class
    # And calling it is a plain call
    assert multiply(2, 3, scale=2) == 12


def test_perform_async_pushes_a_sidekiq_item_with_the_options(redis):
    jid = multiply.set(queue="critical").perform_async(6, 7, scale=1)
    item = json.loads(redis.lpop("queue:critical"))
    assert item["class"] == "tests.testapp.tasks.multiply" and item["args"] == [6, 7] and item["kwargs"] == {"scale": 1}
    assert item["jid"] == jid and item["retain"] == 600


def test_perform_in_and_at_schedule(redis):
    record_call.perform_in(60, "later")
    record_call.perform_at(2_000_000_000, "much later")
    assert redis.zcard("schedule") == 2


def test_inline_mode_runs_the_function_and_retains_its_value(redis):
    with testing.inline_mode():
        jid = multiply.perform_async(3, 4)
    assert results.get(jid).value == 12


def test_nested_functions_are_refused():
    def local():
        return None

    with pytest.raises(ValueError, match="module-level"):
        jobsapp.job(local)


@pytest.mark.slow
def test_a_real_worker_runs_function_jobs(redis_server, redis):
    jid = multiply.perform_async(5, 5, scale=2)
    record_call.perform_async("hello")
    with WorkerProcess(["-c", "2"], redis_url=redis_server.url):
        wait_until(lambda: redis.llen("test:function-ran") == 1, message="the function ran")
        wait_until(lambda: getattr(results.get(jid), "ready", False), message="the result is kept")
    assert results.get(jid).value == 50
