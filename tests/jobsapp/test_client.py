"""The producing side: what perform_async and friends write to Redis, byte for byte."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from jobsapp import PayloadTooLarge, client, middleware
from jobsapp.middleware import ClientMiddleware
from tests.testapp.jobs import HardWorker, ImportRow, Noop


def test_perform_async_writes_sidekiq_item_to_queue(redis):
    # Given a job class with options, When it is enqueued
    jid = ImportRow.perform_async(42, dry_run=True)
    # Then the queue holds one compact JSON item in Sidekiq's format
    assert redis.smembers("queues") == {b"imports"}
    raw = redis.lrange("queue:imports", 0, -1)
    assert len(raw) == 1
    assert b": " not in raw[0] and b", " not in raw[0]
    item = json.loads(raw[0])
    assert item["class"] == "tests.testapp.jobs.ImportRow"
    assert item["args"] == [42]
    assert item["kwargs"] == {"dry_run": True}
    assert item["queue"] == "imports"
    assert item["retry"] == 5
    assert item["use_task_event"] is True
    assert item["tags"] == ["etl"]
    assert item["jid"] == jid and len(jid) == 24 and int(jid, 16) >= 0
    assert isinstance(item["created_at"], float) and isinstance(item["enqueued_at"], float)
    assert "at" not in item


def test_wire_name_option_sets_class_string(redis):
    HardWorker.perform_async("bob", 5)
    item = json.loads(redis.rpop("queue:default"))
    assert item["class"] == "HardWorker"
    assert "class_name" not in item


def test_a_class_without_a_queue_goes_to_the_default_queue_setting_at_push_time(redis, settings):
    # Given a job class that names no queue, When it is pushed with the setting unset
    Noop.perform_async(1)
    # Then it goes to Sidekiq's "default"
    assert json.loads(redis.rpop("queue:default"))["queue"] == "default"
    # When JOBSAPP["DEFAULT_QUEUE"] is set after the class was defined
    settings.JOBSAPP = {**settings.JOBSAPP, "DEFAULT_QUEUE": "low"}
    Noop.perform_async(2)
    Noop.perform_bulk([[3]])
    # Then both pushes go to that queue, as does what tracking reads for the class and its name
    assert [json.loads(raw)["queue"] for raw in redis.lrange("queue:low", 0, -1)] == ["low", "low"]
    assert redis.llen("queue:default") == 0
    assert client.job_template(Noop).queue == client.job_template(Noop.wire_name()).queue == "low"
    # And a class with its own queue keeps it
    assert client.job_template(ImportRow).queue == "imports"
    assert client.job_template("NoSuchRubyWorker") == client.JobTemplate("NoSuchRubyWorker", None, {}, "low")


def test_perform_in_goes_to_schedule_without_at_or_enqueued_at(redis):
    before = time.time()
    jid = Noop.perform_in(30, 1)
    members = redis.zrange("schedule", 0, -1, withscores=True)
    assert len(members) == 1
    member, score = members[0]
    item = json.loads(member)
    assert item["jid"] == jid
    assert "at" not in item and "enqueued_at" not in item
    assert before + 30 <= score <= time.time() + 30
    assert redis.llen("queue:default") == 0


def test_perform_in_accepts_timedelta_and_epoch(redis):
    Noop.perform_in(dt.timedelta(minutes=1))
    epoch = time.time() + 3600
    Noop.perform_in(epoch)
    scores = sorted(score for _, score in redis.zrange("schedule", 0, -1, withscores=True))
    assert scores[0] == pytest.approx(time.time() + 60, abs=2)
    assert scores[1] == pytest.approx(epoch)


def test_time_not_in_future_enqueues_at_once(redis):
    Noop.perform_at(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5))
    Noop.perform_in(0)
    assert redis.llen("queue:default") == 2
    assert redis.zcard("schedule") == 0


def test_set_overrides_options_for_one_push(redis):
    ImportRow.set(queue="critical", retry=False).perform_async(1)
    item = json.loads(redis.rpop("queue:critical"))
    assert item["queue"] == "critical" and item["retry"] is False
    ImportRow.perform_async(2)
    assert redis.llen("queue:imports") == 1


def test_non_json_argument_is_refused_with_its_path(redis):
    with pytest.raises(TypeError, match=r'args\[1\]\["when"\] is a datetime.datetime'):
        Noop.perform_async(1, {"when": dt.datetime.now()})
    with pytest.raises(TypeError, match=r"args\[0\] is a tuple"):
        Noop.perform_async((1, 2))
    with pytest.raises(TypeError, match=r"not valid JSON"):
        Noop.perform_async(float("nan"))
    with pytest.raises(TypeError, match=r"JSON object keys are strings"):
        Noop.perform_async({1: "a"})
    assert redis.dbsize() == 0


def test_oversized_payload_is_refused_before_any_write(redis, settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "MAX_PAYLOAD_BYTES": 1000}
    with pytest.raises(PayloadTooLarge, match="over the 1000-byte limit"):
        Noop.perform_async("x" * 2000)
    assert redis.dbsize() == 0


def test_raw_push_for_a_ruby_worker(redis):
    jid = client.push({"class": "RubyWorker", "args": [1, "two"], "queue": "ruby"})
    item = json.loads(redis.rpop("queue:ruby"))
    assert item["class"] == "RubyWorker" and item["jid"] == jid and item["retry"] is True


def test_push_keeps_unknown_keys(redis):
    client.push({"class": "X", "args": [], "custom": {"a": 1}})
    assert json.loads(redis.rpop("queue:default"))["custom"] == {"a": 1}


def test_bulk_push_is_fifo_and_one_call_per_batch(redis):
    jids = Noop.perform_bulk([[i] for i in range(2500)], batch_size=1000)
    assert len(set(jids)) == 2500
    first = json.loads(redis.rpop("queue:default"))
    assert first["args"] == [0] and first["jid"] == jids[0]
    assert redis.llen("queue:default") == 2499


def test_bulk_push_validates_everything_before_writing(redis):
    with pytest.raises(TypeError, match=r"job 2 of the bulk push: args\[0\] is a set"):
        Noop.perform_bulk([[1], [2], [{3}]])
    assert redis.dbsize() == 0


def test_bulk_push_with_times(redis):
    future = time.time() + 100
    client.push_bulk({"class": "X", "args": [[1], [2]], "at": [future, future + 1]})
    assert redis.zcard("schedule") == 2


class StopOdd(ClientMiddleware):
    def call(self, job_class, item, queue, redis):
        if item["args"] and item["args"][0] % 2:
            return None
        item["stamped"] = True
        return item


def test_client_middleware_can_change_or_stop_a_push(redis):
    middleware.client_chain().add(StopOdd)
    assert Noop.perform_async(1) is None
    jid = Noop.perform_async(2)
    item = json.loads(redis.rpop("queue:default"))
    assert item["jid"] == jid and item["stamped"] is True
    jids = Noop.perform_bulk([[1], [2], [3]])
    assert jids[0] is None and jids[2] is None and jids[1]
    assert redis.llen("queue:default") == 1


def test_redis_down_raises_documented_error(settings):
    from jobsapp import RedisUnavailable, connection
    from tests.redis_server import free_port

    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    connection.reset()
    with pytest.raises(RedisUnavailable, match="Redis is unavailable"):
        Noop.perform_async(1)


def test_bulk_fast_path_writes_the_same_json_as_single_pushes(redis):
    # Given the same job pushed alone and in bulk (no client middleware: the spliced fast path)
    client.push({"class": "X", "args": [{"a": [1, "é"]}], "queue": "q", "custom": "x"})
    client.push_bulk({"class": "X", "args": [[{"a": [1, "é"]}]], "queue": "q", "custom": "x"})
    single, bulk = (json.loads(raw) for raw in redis.lrange("queue:q", 0, -1)[::-1])
    # Then both items have the same fields, in the same order, and differ only in jid and times
    assert list(single) == list(bulk)
    for key in ("jid", "created_at", "enqueued_at"):
        single.pop(key)
        bulk.pop(key)
    assert single == bulk


class OnlyTagged(ClientMiddleware):
    def wants(self, job_class, options):
        return "tagged" in options

    def call(self, job_class, item, queue, redis):
        return {**item, "seen": True}


def test_bulk_skips_middleware_that_does_not_want_the_jobs(redis):
    middleware.client_chain().add(OnlyTagged)
    client.push_bulk({"class": "X", "args": [[1]]})
    client.push_bulk({"class": "X", "args": [[2]], "tagged": 1})
    first, second = (json.loads(raw) for raw in redis.lrange("queue:default", 0, -1)[::-1])
    assert "seen" not in first and second["seen"] is True


@pytest.mark.parametrize("enqueue", ["perform_async", "perform_in", "perform_at", "perform_bulk", "set"])
def test_abstract_base_classes_refuse_to_be_enqueued(redis, enqueue):
    from jobsapp import Job
    from tracking.job import TrackedJob

    for base in (Job, TrackedJob):
        # Given an abstract base class, When it is enqueued, Then a TypeError says so and nothing is written
        calls = {
            "perform_async": lambda base=base: base.perform_async(1),
            "perform_in": lambda base=base: base.perform_in(10, 1),
            "perform_at": lambda base=base: base.perform_at(2_000_000_000, 1),
            "perform_bulk": lambda base=base: base.perform_bulk([[1], [2]]),
            "set": lambda base=base: base.set(queue="critical").perform_async(1),
        }
        with pytest.raises(TypeError, match="abstract base class"):
            calls[enqueue]()
    assert redis.keys("*") == []
