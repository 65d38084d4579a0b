"""``manage.py jobs`` (and ``python -m jobsapp``): every subcommand, as tables and as --json, against
Sidekiq-format data."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobsapp import connection, keys
from tests.jobsapp import sidekiq_data as data
from tests.testapp.jobs import Record


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()


def run_json(*args: str):
    return json.loads(run("--json", *args))


def test_stats_as_table_and_json(redis):
    data.populate(redis)
    table = run("stats")
    lines = table.splitlines()
    assert lines[0].split() == ["stat", "value"] and set(lines[1]) == {"-", " "}
    assert any(line.split() == ["processed", "123456"] for line in lines)
    assert any(line.split() == ["paused_queues", "imports"] for line in lines)
    stats = run_json("stats")
    assert (stats["enqueued"], stats["busy"], stats["dead"], stats["processes"]) == (31, 1, 1, 1)


def test_queues_table_is_aligned(redis):
    now = time.time()
    data.enqueue(redis, data.job(queue="a-very-long-queue-name"), enqueued_at=now)
    data.enqueue(redis, data.job(queue="q"), enqueued_at=now)
    redis.sadd(keys.PAUSED, "q")
    # (the latency is however long the command took to read it, a tenth of a second or more on a
    # busy machine: one digit either side of the point, right-aligned under its header)
    lines = run("queues").splitlines()
    assert lines[:2] == [
        "queue                   size  latency_s  state",
        "----------------------  ----  ---------  ------",
    ]
    assert re.fullmatch(r"a-very-long-queue-name     1        \d\.\d", lines[2]), lines
    assert re.fullmatch(r"q                          1        \d\.\d  paused", lines[3]), lines
    assert len(lines) == 4, lines
    queues = run_json("queues")
    assert [queue["name"] for queue in json.loads(run("queues", "--json"))] == ["a-very-long-queue-name", "q"]
    assert {key: queues[1][key] for key in ("name", "size", "paused")} == {"name": "q", "size": 1, "paused": True}


def test_queue_sizes_and_stats_count_prioritised_jobs(redis):
    # Given a queue holding one plain job and two prioritised ones
    Record.set(queue="urgent").perform_async("plain")
    Record.set(queue="urgent", priority=5).perform_async("five")
    Record.set(queue="urgent", priority=-5).perform_async("minus-five")
    # When the queues and the stats are listed, Then its size counts all three
    assert {queue["name"]: queue["size"] for queue in run_json("queues")} == {"urgent": 3}
    assert run_json("stats")["enqueued"] == 3


def test_processes_lists_live_ones(redis):
    identity = data.process(redis, busy=3, quiet=True)
    assert identity in run("processes") and "quiet" in run("processes")
    assert run_json("processes")[0]["busy"] == 3


def test_busy_lists_running_jobs_with_elapsed_time_and_a_timeout_overrun(redis):
    # Given a process running (in Sidekiq's busy format) a job 95 s into its 30 s timeout and
    # one 10 s into a job without a timeout
    overrun = data.job("app.jobs.CallPartner", [7], timeout=30)
    untimed = data.job("app.jobs.Untimed")
    name = data.process(redis, running=[overrun, untimed])
    now = int(time.time())
    for thread, item, seconds in (("tid0", overrun, 95), ("tid1", untimed, 10)):
        entry = json.dumps({"queue": "default", "payload": data.dump(item).decode(), "run_at": now - seconds})
        redis.hset(keys.work(name), thread, entry)
        redis.hset(keys.workers(name), thread, entry)
    # When `jobs busy` lists them
    table = run("busy").splitlines()
    # Then each has its process, thread, class and running time, longest first; the overrun says so
    assert table[0].split() == ["identity", "thread", "jid", "class", "queue", "args", "running", "timeout", "state"]
    first, second = table[2], table[3]
    assert overrun["jid"] in first and "app.jobs.CallPartner" in first and "30s" in first and first.endswith("overrunning")
    assert untimed["jid"] in second and "overrunning" not in second
    [document] = [entry for entry in run_json("busy") if entry["jid"] == overrun["jid"]]
    assert document["overrunning"] is True and document["timeout_seconds"] == 30 and 95 <= document["elapsed_seconds"] < 120
    assert document["identity"] == name and document["thread"] == "tid0" and document["args"] == [7]


def test_retry_list_filter_retry_all_and_clear(redis):
    now = time.time()
    data.add_to_set(redis, keys.RETRY, data.failed(data.job("A", [{"password": "hunter2"}]), message="disk"), now + 5)
    data.add_to_set(redis, keys.RETRY, data.failed(data.job("B"), message="net"), now + 6)
    table = run("retry", "list")
    assert "RuntimeError" in table and "hunter2" not in table and "[REDACTED]" in table
    listed = run_json("retry", "list", "--class", "A")
    assert listed["total"] == 1 and listed["jobs"][0]["args"] == [{"password": "[REDACTED]"}]
    assert run_json("retry", "list", "--grep", "net")["jobs"][0]["class"] == "B"
    assert run_json("retry", "retry-all", "--class", "B") == {"retried": 1}
    assert redis.llen(keys.queue("default")) == 1
    with pytest.raises(CommandError, match="--yes"):
        run("retry", "clear")
    assert "1 jobs deleted" in run("retry", "clear", "--yes")
    assert redis.zcard(keys.RETRY) == 0


def test_dead_and_schedule(redis):
    now = time.time()
    for index in range(3):
        data.add_to_set(redis, keys.DEAD, data.failed(data.job(args=[index])), now - index)
    data.add_to_set(redis, keys.SCHEDULE, data.job("Later", queue="reports"), now + 60)
    assert "(2 of 3 shown; use --limit)" in run("dead", "list", "--limit", "2")
    assert run_json("dead", "retry-all") == {"retried": 3}
    assert run("dead") == "(none)\n"
    scheduled = run_json("schedule")
    assert scheduled["jobs"][0]["class"] == "Later" and scheduled["jobs"][0]["queue"] == "reports"


def test_pause_resume_quiet_stop(redis):
    run("pause", "mail")
    assert redis.sismember(keys.PAUSED, "mail")
    assert run_json("resume", "mail") == {"queue": "mail", "paused": False}
    identity = data.process(redis)
    run("quiet", identity)
    run("stop", identity)
    assert redis.lrange(keys.signals(identity), 0, -1) == [b"TERM", b"TSTP"]
    with pytest.raises(CommandError, match="no live process"):
        run("stop", "nobody:1:000000000000")


def test_redis_down_is_a_command_error(settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": "redis://127.0.0.1:1/0", "REDIS_SOCKET_TIMEOUT_SECONDS": 0.5}
    connection.reset()
    with pytest.raises(CommandError, match="Redis is unavailable"):
        run("stats")


def test_one_result_prints_its_times_as_iso_8601(redis):
    from jobsapp import testing
    from tests.testapp.jobs import Noop

    # Given a finished job whose result is retained
    jid = Noop.set(retain=60).perform_async()
    testing.execute(json.loads(redis.lpop("queue:default")))
    # When the CLI shows its result
    out = io.StringIO()
    call_command("jobs", "results", jid, stdout=out)
    # Then its times read as UTC ISO 8601, not epoch floats
    rows = {line.split()[0]: line.split()[1:] for line in out.getvalue().splitlines() if line.strip()}
    for field in ("created_at", "enqueued_at", "started_at", "finished_at"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rows[field][0]), (field, rows[field])


def test_read_only_subcommands_are_told_apart_from_the_others():
    from jobsapp.management.subcommands import runs_on_settings_alone

    # Reads, with options before and after the subcommand
    for arguments in (
        ["stats"],
        ["--json", "queues"],
        ["--shard", "bulk", "dead", "--limit", "5"],
        ["retry", "--class", "retry-all"],  # a class named like an action: still the listing
        ["retry", "list", "--grep", "x"],
        ["results", "0123456789abcdef01234567"],
        ["unique"],
    ):
        assert runs_on_settings_alone(arguments), arguments
    # Writes, periodic (its jobs are discovered by the app's ready()) and nothing at all
    writes = (["retry", "retry-all"], ["dead", "clear", "--yes"], ["pause", "default"], ["unique", "release", "d"])
    for arguments in (*writes, ["periodic"], []):
        assert not runs_on_settings_alone(arguments), arguments


def _python_m_jobsapp(redis_server, *arguments: str) -> tuple[dict, bool]:
    """Runs ``python -m jobsapp`` in a fresh interpreter; its JSON answer and whether Django's
    apps were loaded."""
    program = (
        "import sys, django.apps\n"
        "from jobsapp.__main__ import main\n"
        "main(sys.argv[1:])\n"
        "print('apps ready' if django.apps.apps.ready else 'apps not loaded')\n"
    )
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "REDIS_URL": redis_server.url}
    finished = subprocess.run(
        [sys.executable, "-c", program, "--json", *arguments], env=environment, capture_output=True, text=True, timeout=120, check=False
    )
    assert finished.returncode == 0, finished.stderr
    answer, state = finished.stdout.rsplit("\n", 2)[:2]
    return json.loads(answer), state == "apps ready"


@pytest.mark.standalone_only
def test_python_m_jobsapp_reads_on_the_settings_alone_and_writes_after_the_full_start(redis_server, redis):
    # Given Sidekiq-format data with a paused queue
    data.populate(redis)
    # When a read runs through python -m jobsapp, Then it answers as manage.py jobs does, no app loaded
    stats, apps_loaded = _python_m_jobsapp(redis_server, "stats")
    expected = run_json("stats")
    assert stats.pop("default_queue_latency_seconds") == pytest.approx(expected.pop("default_queue_latency_seconds"), abs=5)
    assert stats == expected and not apps_loaded
    # When a write runs through it, Then Django started fully first, and the write is done
    answer, apps_loaded = _python_m_jobsapp(redis_server, "resume", "imports")
    assert answer == {"queue": "imports", "paused": False} and apps_loaded
    assert not redis.sismember(keys.PAUSED, "imports")


@pytest.mark.standalone_only
def test_python_m_jobsapp_reports_a_reads_error_as_manage_py_does(redis_server):
    # Given a read naming a shard the settings do not have
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "REDIS_URL": redis_server.url}
    doors = (["-m", "jobsapp"], ["-m", "django", "jobs"])
    command = ["--shard", "nope", "stats"]
    answers = [
        subprocess.run([sys.executable, *door, *command], env=environment, capture_output=True, text=True, timeout=120, check=False)
        for door in doors
    ]
    # When it runs on the settings alone and under Django's command, Then both say the same, exit status 1
    assert [(answer.returncode, answer.stdout, answer.stderr) for answer in answers] == [
        (1, "", "CommandError: no shard named 'nope'; the shards are: default\n")
    ] * 2
