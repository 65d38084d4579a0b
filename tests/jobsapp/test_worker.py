"""runworkers end to end: a real worker process against the test Redis."""

from __future__ import annotations

import json
import signal
import time

import pytest

from jobsapp import client
from jobsapp.error_fields import decompress_backtrace
from tests.testapp.jobs import RAN_KEY, CustomDelay, Explode, ExplodeNoRetry, ExplodeToDead, Record, Refuse, Sleep
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.slow


def ran(redis) -> list[str]:
    return [value.decode() for value in redis.lrange(RAN_KEY, 0, -1)]


def test_worker_runs_jobs_and_counts_them(redis_server, redis):
    # Given 50 jobs, one with kwargs, When a worker runs
    Record.perform_bulk([[index] for index in range(50)])
    Record.perform_async("kw", extra="yes")
    with WorkerProcess(["-c", "4"], redis_url=redis_server.url) as worker:
        wait_until(lambda: redis.llen(RAN_KEY) == 51, message="all jobs ran")
        wait_until(lambda: redis.get("stat:processed") == b"51", message="stats flushed")
        # Then the process is visible as Sidekiq shows processes
        info = json.loads(redis.hget(worker.identity, "info"))
        assert info["concurrency"] == 4 and info["queues"] == ["default"]
        assert redis.hget(worker.identity, "quiet") == b"false"
        assert redis.sismember("processes", worker.identity)
    assert "kw:yes" in ran(redis)
    assert redis.get("stat:failed") in (None, b"0")
    assert redis.llen("queue:default") == 0
    # And on exit it leaves the processes set and an empty in-flight list
    assert not redis.sismember("processes", worker.identity)
    assert redis.llen(f"jobsapp:inflight:{worker.identity}") == 0


def test_failure_goes_to_retry_with_sidekiq_fields(redis_server, redis):
    jid = Explode.perform_async("kaput")
    with WorkerProcess(["-c", "2"], redis_url=redis_server.url):
        wait_until(lambda: redis.zcard("retry") == 1, message="the job is in the retry set")
    member, score = redis.zrange("retry", 0, -1, withscores=True)[0]
    item = json.loads(member)
    assert item["jid"] == jid
    assert item["error_class"] == "ValueError" and item["error_message"] == "kaput"
    assert item["retry_count"] == 0 and isinstance(item["failed_at"], float)
    lines = decompress_backtrace(item["error_backtrace"])
    assert any("in `perform'" in line for line in lines)
    # Sidekiq's first delay: 0**4 + 15 + rand(10) * 1 -> 15..24 s
    assert 15 <= score - item["failed_at"] <= 25
    assert redis.get("stat:failed") == b"1"


def test_retry_count_increments_and_exhausted_goes_dead(redis_server, redis):
    # Given a job already retried twice (retry=2 allows retry_count 0 and 1)
    item = {
        "class": Explode.wire_name(),
        "args": ["again"],
        "retry": 2,
        "queue": "default",
        "retry_count": 1,
        "failed_at": time.time() - 100,
        "error_message": "old",
        "error_class": "ValueError",
    }
    client.push(item)
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url):
        wait_until(lambda: redis.zcard("dead") == 1, message="the job is dead")
    dead = json.loads(redis.zrange("dead", 0, -1)[0])
    assert dead["retry_count"] == 2 and "retried_at" in dead and dead["error_message"] == "again"
    assert redis.zcard("retry") == 0


def test_retry_false_discards_and_retry_zero_kills(redis_server, redis):
    ExplodeNoRetry.perform_async()
    ExplodeToDead.perform_async()
    Refuse.perform_async()
    with WorkerProcess(["-c", "2"], redis_url=redis_server.url):
        wait_until(lambda: redis.get("stat:failed") == b"3", message="three failures counted")
    assert redis.zcard("retry") == 0
    dead = [json.loads(member) for member in redis.zrange("dead", 0, -1)]
    assert [entry["class"] for entry in dead] == [ExplodeToDead.wire_name()]


def test_custom_retry_delay(redis_server, redis):
    CustomDelay.perform_async()
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url):
        wait_until(lambda: redis.zcard("retry") == 1)
    member, score = redis.zrange("retry", 0, -1, withscores=True)[0]
    assert score - json.loads(member)["failed_at"] == pytest.approx(3600, abs=2)


def test_hostile_and_malformed_payloads_go_dead_unknown_classes_retry_and_innocents_run(redis_server, redis):
    # Given poison and unknown classes in the queue between innocent jobs
    Record.perform_async("before")
    redis.lpush("queue:default", b"{not json")
    redis.lpush("queue:default", b"\xff\xfe binary")
    client.push({"class": "os.system", "args": ["touch /tmp/pwned"]})
    client.push({"class": "builtins.eval", "args": ["1+1"]})
    client.push({"class": "../../etc/passwd", "args": []})
    Record.perform_async("after")
    # When a worker drains the queue
    with WorkerProcess(["-c", "2"], redis_url=redis_server.url):
        wait_until(
            lambda: redis.llen(RAN_KEY) == 2 and redis.zcard("dead") == 3 and redis.zcard("retry") == 2,
            message="innocents ran, poison buried, unknown classes waiting for a retry",
        )
    # Then the innocents ran, what is not a job or not a class name is dead
    assert sorted(ran(redis)) == ["after", "before"]
    dead = [json.loads(member) for member in redis.zrange("dead", 0, -1)]
    reasons = {entry["class"]: entry["error_class"] for entry in dead}
    assert reasons["../../etc/passwd"] == "jobsapp.errors.UnknownJobClass"
    assert reasons["jobsapp.MalformedPayload"] == "jobsapp.errors.MalformedPayload"
    malformed = [entry for entry in dead if entry["class"] == "jobsapp.MalformedPayload"]
    assert {entry["args"][0] for entry in malformed} == {"{not json", "\ufffd\ufffd binary"}
    # And an unknown (but well-formed) class goes through the normal retry, as Sidekiq's NameError,
    # saying where job classes are found; nothing was imported or run
    retried = {entry["class"]: entry for entry in (json.loads(member) for member in redis.zrange("retry", 0, -1))}
    assert set(retried) == {"os.system", "builtins.eval"}
    assert retried["os.system"]["error_class"] == "jobsapp.errors.UnknownJobClass"
    assert retried["os.system"]["retry_count"] == 0
    assert "jobs.py" in retried["os.system"]["error_message"] and "'os.system'" in retried["os.system"]["error_message"]


def test_scheduled_job_runs_when_due_not_before(redis_server, redis):
    with WorkerProcess(["-c", "2"], redis_url=redis_server.url):
        due = time.time() + 1.5
        Record.perform_at(due, "scheduled")
        time.sleep(1.0)
        assert redis.llen(RAN_KEY) == 0
        wait_until(lambda: redis.llen(RAN_KEY) == 1, timeout_seconds=5)
        assert time.time() - due < 1.0
    assert redis.zcard("schedule") == 0


def test_strict_queue_order(redis_server, redis):
    for index in range(5):
        Record.set(queue="low").perform_async(f"low{index}")
        Record.set(queue="high").perform_async(f"high{index}")
    with WorkerProcess(["-q", "high", "-q", "low", "-c", "1"], redis_url=redis_server.url):
        wait_until(lambda: redis.llen(RAN_KEY) == 10)
    assert ran(redis)[:5] == [f"high{index}" for index in range(5)]


def test_paused_queue_is_skipped(redis_server, redis):
    redis.sadd("jobsapp:paused", "paused")
    Record.set(queue="paused").perform_async("waits")
    Record.perform_async("runs")
    with WorkerProcess(["-q", "default", "-q", "paused", "-c", "1"], redis_url=redis_server.url):
        wait_until(lambda: redis.llen(RAN_KEY) == 1)
        time.sleep(0.5)
        assert ran(redis) == ["runs"] and redis.llen("queue:paused") == 1
        redis.srem("jobsapp:paused", "paused")
        wait_until(lambda: redis.llen(RAN_KEY) == 2)


def test_term_puts_unfinished_jobs_back_at_the_front(redis_server, redis):
    # Given a job that outlives the shutdown timeout
    Sleep.perform_async(30, "slow")
    worker = WorkerProcess(["-c", "1", "-t", "1"], redis_url=redis_server.url).start()
    wait_until(lambda: redis.llen("test:started") == 1, message="the slow job started")
    Record.perform_async("queued-after")
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < 8
    # Then the slow job is at the front (right end) of its queue, and nowhere else
    queue = [json.loads(raw) for raw in redis.lrange("queue:default", 0, -1)]
    assert queue[-1]["class"] == Sleep.wire_name()
    assert redis.zcard("retry") == 0
    assert redis.llen(f"jobsapp:inflight:{worker.identity}") == 0


def test_tstp_and_signals_list_quiet_the_process(redis_server, redis):
    fast_beat = {"JOBSAPP_TEST_OVERRIDES": '{"HEARTBEAT_INTERVAL_SECONDS": 0.3}'}
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url, env=fast_beat) as worker:
        redis.lpush(f"{worker.identity}-signals", "TSTP")
        wait_until(lambda: redis.hget(worker.identity, "quiet") == b"true", timeout_seconds=12, message="quiet through Redis")
        Record.perform_async("not fetched")
        time.sleep(1.0)
        assert redis.llen("queue:default") == 1


def test_sigkill_loses_nothing_and_restart_in_slot_recovers_at_once(redis_server, redis):
    jid = Sleep.perform_async(30, "killed-mid-run")
    worker = WorkerProcess(["-c", "1"], redis_url=redis_server.url).start()
    wait_until(lambda: redis.llen("test:started") == 1)
    worker.kill()
    assert redis.llen(f"jobsapp:inflight:{worker.identity}") == 1
    # When a new process starts in the same slot on this host, the job comes back at once
    with WorkerProcess(["-c", "1", "-t", "0"], redis_url=redis_server.url):
        wait_until(lambda: redis.llen("test:started") == 2, timeout_seconds=10, message="the job ran again")
        assert redis.hget("jobsapp:recoveries", jid) == b"1"
        assert redis.llen(f"jobsapp:inflight:{worker.identity}") == 0


def test_orphans_of_a_dead_process_are_swept(redis_server, redis, settings):
    # Given an in-flight list whose owner has no heartbeat (a process on another host that died)
    jid = client.push({"class": Record.wire_name(), "args": ["orphan"]})
    raw = redis.rpop("queue:default")
    redis.lpush("jobsapp:inflight:otherhost:1:abcdefabcdef", raw)
    redis.sadd("jobsapp:inflight", "otherhost:1:abcdefabcdef")
    redis.sadd("processes", "otherhost:1:abcdefabcdef")
    fast = {"JOBSAPP_TEST_OVERRIDES": '{"HEARTBEAT_INTERVAL_SECONDS": 0.3, "ORPHAN_SWEEP_INTERVAL_SECONDS": 0.5}'}
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url, env=fast):
        wait_until(lambda: redis.llen(RAN_KEY) == 1, timeout_seconds=15, message="the orphan ran")
    assert ran(redis) == ["orphan"]
    assert not redis.sismember("jobsapp:inflight", "otherhost:1:abcdefabcdef")
    assert not redis.sismember("processes", "otherhost:1:abcdefabcdef")
    assert redis.hget("jobsapp:recoveries", jid) is None  # acked: the counter is dropped


def test_ttin_and_bad_flags(redis_server, redis):
    with WorkerProcess(["-c", "1"], redis_url=redis_server.url) as worker:
        worker.signal(signal.SIGTTIN)
        wait_until(lambda: "jobsapp.heartbeat" in worker.output, message="thread dump logged")


def test_sigkill_mid_drain_then_restart_runs_every_job(redis_server, redis):
    # Given 3,000 jobs being drained by a worker
    total = 3000
    Record.perform_bulk([[index] for index in range(total)])
    worker = WorkerProcess(["-c", "10"], redis_url=redis_server.url).start()
    wait_until(lambda: redis.llen(RAN_KEY) >= 500, timeout_seconds=30, message="the drain is under way")
    # When it is killed without warning, mid-drain, and started again
    worker.kill()
    killed_at = redis.llen(RAN_KEY)
    assert killed_at < total, "the worker finished before it could be killed; use more jobs"
    with WorkerProcess(["-c", "10"], redis_url=redis_server.url):
        wait_until(
            lambda: redis.llen("queue:default") == 0 and len(set(redis.lrange(RAN_KEY, 0, -1))) == total,
            timeout_seconds=60,
            message="every job ran after the restart",
        )
    # Then every job ran at least once, nothing is left anywhere, duplicates are few
    runs = [int(value) for value in redis.lrange(RAN_KEY, 0, -1)]
    assert set(runs) == set(range(total))
    assert len(runs) - total <= 60  # at most one fetch batch plus one ack batch ran twice
    assert redis.llen(f"jobsapp:inflight:{worker.identity}") == 0
    assert redis.zcard("retry") == 0 and redis.zcard("dead") == 0


def test_idle_worker_on_several_queues_wakes_for_any_of_them(redis_server, redis):
    with WorkerProcess(["-q", "a", "-q", "b", "-q", "c", "-c", "2"], redis_url=redis_server.url):
        time.sleep(0.5)  # idle: every queue's waiter is blocked
        for index, queue in enumerate(["c", "b", "a", "c"]):
            Record.set(queue=queue).perform_async(f"{queue}{index}")
            wait_until(lambda index=index: redis.llen(RAN_KEY) == index + 1, timeout_seconds=5)
    assert sorted(ran(redis)) == ["a2", "b1", "c0", "c3"]
    assert all(redis.llen(f"queue:{name}") == 0 for name in "abc")


def test_quiet_worker_on_several_queues_takes_nothing_more(redis_server, redis):
    fast_beat = {"JOBSAPP_TEST_OVERRIDES": '{"HEARTBEAT_INTERVAL_SECONDS": 0.3}'}
    with WorkerProcess(["-q", "a", "-q", "b", "-c", "2"], redis_url=redis_server.url, env=fast_beat) as worker:
        time.sleep(0.3)  # idle: a waiter is blocked on each queue
        worker.signal(signal.SIGTSTP)
        wait_until(lambda: redis.hget(worker.identity, "quiet") == b"true", message="quiet")
        for queue in ("a", "b"):
            Record.set(queue=queue).perform_async(f"after quiet on {queue}")
        time.sleep(2.5)  # longer than an idle BLMOVE
        # Then both jobs wait on their queues, none is held in this quiet process's in-flight list
        assert redis.llen("queue:a") == 1 and redis.llen("queue:b") == 1
        assert redis.llen(f"jobsapp:inflight:{worker.identity}") == 0
        assert redis.llen(RAN_KEY) == 0
