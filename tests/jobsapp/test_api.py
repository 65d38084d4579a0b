"""jobsapp.api against a real Redis holding Sidekiq 6.4-format data (written as Ruby would)."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
import redis as redis_lib

from jobsapp import RedisUnavailable, api, keys
from jobsapp.api.records import parse_entry_key
from tests.jobsapp import sidekiq_data as data


def _raw_members(redis, name):
    return redis.zrange(name, 0, -1)


# --- records ------------------------------------------------------------------------------


def test_record_decodes_compressed_plain_and_garbled_backtraces():
    compressed = api.JobRecord(data.dump(data.failed(data.job(), backtrace=["a.py:1", "b.py:2"])))
    plain = api.JobRecord(data.dump({**data.job(), "error_backtrace": ["old.rb:1"]}))
    garbled = api.JobRecord(data.dump({**data.job(), "error_backtrace": "not base64 at all!"}))
    assert compressed.error_backtrace == ["a.py:1", "b.py:2"]
    assert plain.error_backtrace == ["old.rb:1"]
    assert garbled.error_backtrace == ["(the backtrace could not be decoded)"]
    assert api.JobRecord(data.dump(data.job())).error_backtrace == []


def test_record_redacts_secret_keys_recursively_and_ignoring_case():
    item = data.job(args=[1, {"Password": "p", "nested": [{"api_token": "t", "ok": "visible"}]}])
    item["kwargs"] = {"AUTHORIZATION": "Bearer x", "user": "ann"}
    record = api.JobRecord(data.dump(item))
    assert record.display_args == [
        1,
        {"Password": "[REDACTED]", "nested": [{"api_token": "[REDACTED]", "ok": "visible"}]},
    ]
    assert record.display_kwargs == {"AUTHORIZATION": "[REDACTED]", "user": "ann"}
    preview = record.args_preview()
    assert "Bearer" not in preview and '"p"' not in preview and "visible" in preview
    assert record.args == item["args"], "the raw args are untouched"


def test_redact_keys_setting_is_read_at_call_time(settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "REDACT_KEYS": ["ssn"]}
    record = api.JobRecord(data.dump(data.job(args=[{"ssn": "123", "password": "shown"}])))
    assert record.display_args == [{"ssn": "[REDACTED]", "password": "shown"}]


def test_args_preview_is_truncated():
    record = api.JobRecord(data.dump(data.job(args=["x" * 1000])))
    preview = record.args_preview(50)
    assert len(preview) == 50 and preview.endswith("…")


def test_invalid_json_makes_an_invalid_record_that_keeps_its_raw_bytes():
    record = api.JobRecord(b"\xff{not json")
    assert record.invalid and record.raw == b"\xff{not json"
    assert record.display_class == "(invalid job)"
    assert record.args == [record.text]


def test_enqueued_at_in_milliseconds_is_read_as_seconds():
    record = api.JobRecord(data.dump({**data.job(), "enqueued_at": 1_700_000_000_500}))
    assert record.enqueued_at == pytest.approx(1_700_000_000.5)
    assert record.latency(now=1_700_000_010.5) == pytest.approx(10.0)


def test_display_class_unwraps_activejob():
    item = data.job(
        "ActiveJob::QueueAdapters::SidekiqAdapter::JobWrapper",
        [{"job_class": "SendMail", "arguments": [{"secret": "s"}, 3]}],
        wrapped="SendMail",
    )
    record = api.JobRecord(data.dump(item))
    assert record.display_class == "SendMail"
    assert record.display_args == [{"secret": "[REDACTED]"}, 3]


# --- stats --------------------------------------------------------------------------------


@pytest.mark.standalone_only  # counts round trips through the standalone client's pipeline
def test_stats_counts_everything_in_two_round_trips(redis, monkeypatch):
    now = time.time()
    redis.set(keys.STAT_PROCESSED, 10)
    redis.set(keys.STAT_FAILED, 3)
    for index in range(3):
        data.enqueue(redis, data.job(), enqueued_at=now - 40 + index)
    data.enqueue(redis, data.job(queue="low"), enqueued_at=now - 5)
    data.add_to_set(redis, keys.SCHEDULE, data.job(), now + 10)
    data.add_to_set(redis, keys.RETRY, data.failed(data.job()), now + 10)
    data.add_to_set(redis, keys.RETRY, data.failed(data.job()), now + 20)
    data.add_to_set(redis, keys.DEAD, data.failed(data.job()), now)
    data.process(redis, busy=2)
    data.process(redis, busy=3)
    redis.sadd(keys.PROCESSES, "gone:1:abcdefabcdef")  # heartbeat expired: not counted
    redis.sadd(keys.PAUSED, "low")

    executed = []
    original = redis_lib.client.Pipeline.execute

    def counting_execute(self, *args, **kwargs):
        executed.append(len(self.command_stack))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis_lib.client.Pipeline, "execute", counting_execute)
    stats = api.Stats.fetch(now=now)

    assert len(executed) == 2
    assert (stats.processed, stats.failed, stats.enqueued) == (10, 3, 4)
    assert (stats.scheduled_size, stats.retry_size, stats.dead_size) == (1, 2, 1)
    assert (stats.processes_size, stats.busy) == (2, 5)
    assert stats.default_queue_latency == pytest.approx(40, abs=0.01)
    by_name = {queue.name: queue for queue in stats.queues}
    assert by_name["default"].size == 3 and not by_name["default"].paused
    assert by_name["low"].paused and by_name["low"].latency_seconds == pytest.approx(5, abs=0.01)
    assert stats.paused_queues == ["low"]


def test_history_reads_daily_counters_newest_first_with_missing_days_as_zero(redis):
    today = dt.date(2024, 3, 10)
    data.daily(redis, today, processed=5, failed=1)
    data.daily(redis, today - dt.timedelta(days=2), processed=7, failed=0)
    history = api.Stats.history(3, start_date=today)
    assert list(history.processed.items()) == [("2024-03-10", 5), ("2024-03-09", 0), ("2024-03-08", 7)]
    assert history.failed == {"2024-03-10": 1, "2024-03-09": 0, "2024-03-08": 0}
    with pytest.raises(ValueError):
        api.Stats.history(0)


# --- queues -------------------------------------------------------------------------------


def test_queue_size_latency_and_paging_newest_first(redis):
    now = time.time()
    raws = [data.enqueue(redis, data.job(args=[index]), enqueued_at=now - 100 + index) for index in range(5)]
    queue = api.Queue("default")
    assert queue.size() == 5
    assert queue.latency(now=now) == pytest.approx(100, abs=0.01)
    first = queue.page(1, 2)
    assert [record.args for record in first.entries] == [[4], [3]]
    assert (first.total, first.page_count, first.has_next) == (5, 3, True)
    assert queue.page(3, 2).entries[0].raw == raws[0]
    assert api.Queue("empty").latency() == 0.0


def test_queue_delete_removes_exactly_the_stored_bytes(redis):
    # Given a job whose JSON a re-serialization would change (key order, spacing, escapes)
    odd = b'{"queue":"default", "class":"HardWorker","args":["caf\\u00e9"],"jid":"aaaaaaaaaaaaaaaaaaaaaaaa"}'
    redis.sadd(keys.QUEUES, "default")
    redis.lpush(keys.queue("default"), odd)
    other = data.enqueue(redis, data.job())
    # When it is deleted by jid
    assert api.Queue("default").delete_job("aaaaaaaaaaaaaaaaaaaaaaaa") is True
    # Then only it is gone, and a second delete finds nothing
    assert redis.lrange(keys.queue("default"), 0, -1) == [other]
    assert api.Queue("default").delete_job("aaaaaaaaaaaaaaaaaaaaaaaa") is False


def test_queue_find_job_and_clear(redis):
    items = [data.job() for _ in range(3)]
    for item in items:
        data.enqueue(redis, item)
    queue = api.Queue("default")
    assert queue.find_job(items[1]["jid"]).args == items[1]["args"]
    assert queue.find_job("f" * 24) is None
    assert queue.clear() == 3
    assert not redis.exists(keys.queue("default"))
    assert not redis.sismember(keys.QUEUES, "default")


def test_pause_and_resume_and_paused_queues_stay_listed(redis):
    data.enqueue(redis, data.job(queue="mail"))
    api.Queue("mail").pause()
    api.Queue("never-used").pause()
    assert redis.smembers(keys.PAUSED) == {b"mail", b"never-used"}
    assert [queue.name for queue in api.Queue.all()] == ["mail", "never-used"]
    assert api.Queue("mail").is_paused()
    api.Queue("mail").resume()
    assert not api.Queue("mail").is_paused()


# --- sorted sets --------------------------------------------------------------------------


def test_retry_now_moves_to_queue_atomically_with_enqueued_at_and_lower_retry_count(redis):
    item = data.failed(data.job(queue="critical", extra_key={"kept": True}), count=3)
    raw = data.add_to_set(redis, keys.RETRY, item, time.time() + 500)
    entry = api.RetrySet().find_job(item["jid"])
    assert entry.raw == raw and entry.retry_count == 3
    assert api.RetrySet().retry(entry, now=1_700_000_000.25) is True
    assert redis.zcard(keys.RETRY) == 0
    assert redis.sismember(keys.QUEUES, "critical")
    pushed = json.loads(redis.lindex(keys.queue("critical"), 0))
    assert pushed["retry_count"] == 2 and pushed["enqueued_at"] == 1_700_000_000.25
    assert pushed["jid"] == item["jid"] and pushed["extra_key"] == {"kept": True}
    # A second click finds the job gone and writes nothing.
    assert api.RetrySet().retry(entry) is False
    assert redis.llen(keys.queue("critical")) == 1


def test_add_to_queue_from_schedule_keeps_the_payload(redis):
    item = data.job(queue="reports")
    data.add_to_set(redis, keys.SCHEDULE, item, time.time() + 3600)
    entry = api.ScheduledSet().find_job(item["jid"])
    assert api.ScheduledSet().add_to_queue(entry) is True
    pushed = json.loads(redis.lindex(keys.queue("reports"), 0))
    assert {key: pushed[key] for key in item} == item and "enqueued_at" in pushed


def test_kill_moves_raw_member_to_dead_and_trims(redis, settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "DEAD_MAX_JOBS": 3, "DEAD_TIMEOUT_SECONDS": 1000}
    now = 1_700_000_000.0
    data.add_to_set(redis, keys.DEAD, data.job(), now - 5000)  # older than the timeout
    for offset in range(3):
        data.add_to_set(redis, keys.DEAD, data.job(), now - 100 + offset)
    item = data.failed(data.job())
    raw = data.add_to_set(redis, keys.RETRY, item, now + 60)
    assert api.RetrySet().kill(api.RetrySet().find_job(item["jid"]), now=now) is True
    assert redis.zcard(keys.RETRY) == 0
    assert redis.zcard(keys.DEAD) == 3
    assert redis.zscore(keys.DEAD, raw) == now, "the raw member, unchanged, scored at time of death"
    with pytest.raises(ValueError):
        api.DeadSet().kill(api.DeadSet().find_job(item["jid"]))


def test_set_paging_order_and_filters(redis):
    now = time.time()
    for index in range(5):
        data.add_to_set(redis, keys.DEAD, data.failed(data.job("A", [index])), now - 100 + index)
    data.add_to_set(redis, keys.DEAD, data.failed(data.job("B", ["needle"]), message="Boom Needle"), now - 500)
    data.add_to_set(redis, keys.DEAD, data.failed(data.job("C", [{"password": "needle"}])), now - 400)
    dead = api.DeadSet()
    page = dead.page(1, 2)
    assert [entry.args for entry in page.entries] == [[4], [3]], "dead set lists newest first"
    assert page.total == 7
    assert [entry.klass for entry in dead.page(1, 10, class_name="A").entries] == ["A"] * 5
    needle = dead.page(1, 10, substring="NEEDLE")
    assert [entry.klass for entry in needle.entries] == ["B"], "the redacted password never matches"
    retries = api.RetrySet()
    data.add_to_set(redis, keys.RETRY, data.failed(data.job(args=["late"])), now + 50)
    data.add_to_set(redis, keys.RETRY, data.failed(data.job(args=["soon"])), now + 5)
    assert [entry.args for entry in retries.page().entries] == [["soon"], ["late"]]


def test_get_many_by_entry_key_and_bulk_apply(redis):
    now = time.time()
    items = [data.failed(data.job(args=[index])) for index in range(4)]
    for item in items:
        data.add_to_set(redis, keys.RETRY, item, now + 1)  # same score: keys tell them apart by jid
    retries = api.RetrySet()
    entries = retries.page().entries
    chosen = [entries[0].key, entries[2].key, "garbage", "1.0-nothere"]
    assert parse_entry_key("garbage") is None
    selected = retries.get_many(chosen)
    assert {entry.jid for entry in selected} == {entries[0].jid, entries[2].jid}
    assert retries.apply("delete", selected) == 2
    assert retries.size() == 2
    with pytest.raises(ValueError):
        retries.apply("explode", selected)


def test_retry_all_skips_invalid_members_and_kill_all_with_filter(redis):
    now = time.time()
    for index in range(1200):  # more than one chunk
        data.add_to_set(redis, keys.RETRY, data.failed(data.job(args=[index])), now + index)
    redis.zadd(keys.RETRY, {b"not json": now - 1})
    assert api.RetrySet().retry_all() == 1200
    assert redis.zrange(keys.RETRY, 0, -1) == [b"not json"]
    assert redis.llen(keys.queue("default")) == 1200
    for klass in ("A", "B", "A"):
        data.add_to_set(redis, keys.SCHEDULE, data.job(klass), now + 100)
    assert api.ScheduledSet().kill_all(class_name="A") == 2
    assert redis.zcard(keys.DEAD) == 2 and redis.zcard(keys.SCHEDULE) == 1
    assert api.DeadSet().delete_all(class_name="A") == 2
    assert api.ScheduledSet().clear() == 1


# --- processes and work -------------------------------------------------------------------


def test_process_set_lists_live_processes_and_prunes_dead_ones(redis):
    live = data.process(redis, busy=1, quiet=True, queues=["a", "b"])
    redis.sadd(keys.PROCESSES, "dead:1:000000000000")
    processes = api.ProcessSet.all()
    assert [process.identity for process in processes] == [live]
    process = processes[0]
    assert process.quiet and process.busy == 1 and process.queues == ["a", "b"]
    assert process.hostname == "web-1" and process.pid == 4242 and process.rss_kb == 51234
    assert not redis.sismember(keys.PROCESSES, "dead:1:000000000000")


def test_quiet_and_stop_push_signals_only_for_known_processes(redis):
    live = data.process(redis)
    assert api.ProcessSet.quiet(live) is True
    assert api.ProcessSet.stop(live) is True
    assert redis.lrange(keys.signals(live), 0, -1) == [b"TERM", b"TSTP"]
    assert 0 < redis.ttl(keys.signals(live)) <= 60
    assert api.ProcessSet.stop("queue:default") is False
    assert not redis.exists(keys.signals("queue:default"))


def test_work_set_reads_workers_of_6_4_and_work_of_7(redis):
    ruby_job, our_job = data.job("RubyJob"), data.job("PyJob", [{"secret": "x"}])
    data.process(redis, running=[ruby_job], write_work=False)
    data.process(redis, running=[our_job])
    running = api.WorkSet.all()
    assert {work.record.klass for work in running} == {"RubyJob", "PyJob"}
    py = next(work for work in running if work.record.klass == "PyJob")
    assert py.record.display_args == [{"secret": "[REDACTED]"}] and py.queue == "default" and py.run_at > 0
    assert api.WorkSet.size() == 2


def test_reserved_set_lists_fetched_jobs_a_process_has_not_started(redis):
    # Given a live process running one job, whose in-flight list holds it and two more it fetched
    # (fetch.lua pushes each at the head), and a dead process's in-flight list
    running, first, second = data.job("PyJob", [1]), data.job("PyJob", [2]), data.job("PyJob", [3])
    live = data.process(redis, running=[running])
    for item in (running, first, second):
        redis.lpush(keys.inflight(live), json.dumps(item))
    redis.lpush(keys.inflight("gone:1:000000000000"), json.dumps(data.job("PyJob", [4])))
    redis.sadd(keys.PROCESSES, "gone:1:000000000000")
    # When the reserved jobs are listed, Then they are the fetched, unstarted ones of the live process, oldest first
    reserved = api.ReservedSet.all()
    assert [(entry.identity, entry.record.jid) for entry in reserved] == [(live, first["jid"]), (live, second["jid"])]


# --- find_job and errors ------------------------------------------------------------------


def test_find_job_everywhere(redis):
    ids = data.populate(redis)
    assert api.find_job(ids["running"]).kind == "running"
    assert api.find_job(ids["retry"]).kind == "retry"
    assert api.find_job(ids["scheduled"]).kind == "scheduled"
    assert api.find_job(ids["dead"]).kind == "dead"
    queued_jid = json.loads(ids["queued"][3])["jid"]
    location = api.find_job(queued_jid)
    assert (location.kind, location.name) == ("queue", "default")
    assert api.find_job("*") is None and api.find_job("") is None


def test_jobs_pushed_by_our_client_are_listed(redis):
    from jobsapp import client

    jid = client.push({"class": "HardWorker", "args": [1], "queue": "default"})
    client.push({"class": "HardWorker", "args": [2], "at": time.time() + 60})
    assert api.Queue("default").find_job(jid).args == [1]
    assert api.ScheduledSet().page().entries[0].args == [2]


def test_redis_down_raises_redis_unavailable(settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": "redis://127.0.0.1:1/0", "REDIS_SOCKET_TIMEOUT_SECONDS": 0.5}
    from jobsapp import connection

    connection.reset()
    with pytest.raises(RedisUnavailable):
        api.Stats.fetch()
    with pytest.raises(RedisUnavailable):
        list(api.Queue("default").scan())
    with pytest.raises(RedisUnavailable):
        api.RetrySet().retry_all()
