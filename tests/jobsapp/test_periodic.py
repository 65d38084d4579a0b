"""Periodic jobs: definitions, the tick claim (periodic_claim.lua), sidekiq-cron's layout, and
real worker processes ticking together."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import zoneinfo

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobsapp import api, keys, periodic
from jobsapp.connection import get_redis
from tests.testapp.jobs import RAN_KEY
from tests.workers import WorkerProcess

RECORD = "tests.testapp.jobs.Record"


def definition(**spec):
    return periodic.build(spec.pop("name", "report"), {"class": RECORD, **spec})


def server_now() -> float:
    return periodic.server_time(get_redis())


def test_racing_processes_claim_a_tick_exactly_once(redis):
    # Given a job every 10 s, registered, and the tick after the registration's one
    job = definition(every=10, args=["tick"])
    now = server_now()
    periodic.register(get_redis(), job, server_now=now - 10)
    tick = job.previous_tick(now)
    results = []
    barrier = threading.Barrier(10)

    # When 10 threads claim that tick at once
    def claim():
        barrier.wait()
        results.append(periodic.claim(get_redis(), job, tick, created_at=now))

    threads = [threading.Thread(target=claim) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then one pushed the job, the nine others were told it was done
    assert sorted(outcome for _, outcome, _ in results) == ["done"] * 9 + ["enqueued"]
    assert redis.llen("queue:default") == 1
    pushed = json.loads(redis.rpop("queue:default"))
    assert pushed["class"] == RECORD and pushed["args"] == ["tick"] and pushed["periodic"] == "report"
    assert pushed["enqueued_at"] >= now - 1
    # and the hash is in sidekiq-cron's layout
    fields = {key.decode(): value.decode() for key, value in redis.hgetall("cron_job:report").items()}
    assert redis.sismember("cron_jobs", keys.cron_job("report"))
    assert fields["status"] == "enabled" and fields["klass"] == RECORD and fields["jobsapp_last_jid"] == pushed["jid"]
    assert json.loads(redis.lindex("cron_job:report:jid_history", 0))["jid"] == pushed["jid"]
    assert redis.zcard("cron_job:report:enqueued") == 1


def test_a_new_job_starts_from_its_next_tick_and_a_future_tick_is_early(redis):
    # Given a daily job declared now
    job = definition(cron="0 9 * * *", timezone="Europe/Paris")
    now = server_now()
    periodic.register(get_redis(), job, server_now=now)
    # When its latest past tick and its next tick are claimed
    past = periodic.claim(get_redis(), job, job.previous_tick(now), created_at=now)
    future = periodic.claim(get_redis(), job, job.next_tick(now), created_at=now)
    # Then neither runs: the past one counts as done, the future one is not due by the server clock
    assert past[:2] == (False, "done")
    assert future[:2] == (False, "early")
    assert redis.llen("queue:default") == 0
    # and 09:00 Paris time is the next tick
    moment = dt.datetime.fromtimestamp(job.next_tick(now), zoneinfo.ZoneInfo("Europe/Paris"))
    assert (moment.hour, moment.minute) == (9, 0)


@pytest.mark.parametrize(("missed", "pushed"), [("run_once", 1), ("skip", 0)])
def test_after_downtime_a_missed_tick_runs_once_or_is_skipped(redis, missed, pushed):
    # Given a minutely job whose last tick was an hour ago (the workers were down since)
    job = definition(every=60, missed=missed)
    now = server_now()
    periodic.register(get_redis(), job, server_now=now - 3600)
    # When a process comes back 2 minutes after the latest tick and claims the sixty missed
    # ticks it could see, oldest first, then the latest one again
    latest = job.previous_tick(now) - 120
    outcomes = [periodic.claim(get_redis(), job, latest, created_at=now)[1] for _ in range(2)]
    # Then the job ran once (run_once) or not at all (skip), never once per missed tick
    assert redis.llen("queue:default") == pushed
    assert outcomes == (["enqueued", "done"] if pushed else ["skipped", "done"])


def test_a_tick_goes_to_the_default_queue_as_of_its_push_unless_a_queue_is_named(redis, settings):
    # Given a job naming no queue (nor does its class) and one naming "reports", built and
    # registered while DEFAULT_QUEUE is "first"
    settings.JOBSAPP = {**settings.JOBSAPP, "DEFAULT_QUEUE": "first"}
    unnamed, named = definition(every=1), definition(name="named", every=1, queue="reports")
    now = server_now()
    for job in (unnamed, named):
        periodic.register(get_redis(), job, server_now=now - 5)
    # When DEFAULT_QUEUE changes to "second" before their ticks are claimed
    settings.JOBSAPP = {**settings.JOBSAPP, "DEFAULT_QUEUE": "second"}
    for job in (unnamed, named):
        assert periodic.claim(get_redis(), job, job.previous_tick(now), created_at=now)[1] == "enqueued"
    # Then the unnamed one's tick went to DEFAULT_QUEUE as of the push, the named one to its queue
    (pushed,) = [json.loads(raw) for raw in redis.lrange("queue:second", 0, -1)]
    assert pushed["class"] == RECORD and pushed["queue"] == "second" and pushed["periodic"] == "report"
    assert redis.llen("queue:reports") == 1 and redis.llen("queue:first") == 0
    assert {b"second", b"reports"} <= redis.smembers("queues")


def test_a_disabled_job_does_not_run_until_enabled(redis):
    # Given a job every second, disabled from the dashboard's API
    job = definition(every=1)
    now = server_now()
    periodic.register(get_redis(), job, server_now=now - 5)
    assert api.PeriodicSet.set_enabled("report", False)
    # When a tick is claimed, then the job is enabled and the next tick claimed
    first = periodic.claim(get_redis(), job, job.previous_tick(now) - 1, created_at=now)
    assert api.PeriodicSet.set_enabled("report", True)
    second = periodic.claim(get_redis(), job, job.previous_tick(now), created_at=now)
    # Then only the second ran
    assert first[1] == "disabled" and second[1] == "enqueued"
    assert redis.llen("queue:default") == 1
    assert api.PeriodicSet.set_enabled("missing", True) is False


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"class": RECORD, "cron": "61 * * * *"}, "not a cron expression"),
        ({"class": RECORD, "cron": "* * * * *", "every": 5}, "exactly one"),
        ({"class": RECORD}, "exactly one"),
        ({"class": RECORD, "every": 0}, "whole number of seconds"),
        ({"class": "os.system", "every": 5}, "not a registered job class"),
        ({"class": RECORD, "every": 5, "timezone": "Mars/Olympus"}, "unknown timezone"),
        ({"class": RECORD, "every": 5, "sometimes": True}, "unknown key(s) sometimes"),
        ({"class": RECORD, "every": 5, "args": [object()]}, "args"),
        ({"class": RECORD, "every": 5, "missed": "twice"}, '"missed"'),
    ],
)
def test_bad_definitions_are_refused_with_the_reason(settings, spec, message):
    # Given a PERIODIC setting with one bad entry
    settings.JOBSAPP = {**settings.JOBSAPP, "PERIODIC": {"report": spec}}
    # When the definitions are read, then the error names the job and the problem
    with pytest.raises(ImproperlyConfigured, match="report") as error:
        periodic.definitions()
    assert message in str(error.value)


@pytest.mark.standalone_only  # sidekiq-cron's layout, written as Ruby writes it
def test_a_ruby_sidekiq_cron_job_shows_up_and_can_be_run_now(redis):
    # Given a cron job saved by Ruby's sidekiq-cron 1.8 (its hash fields, its set member)
    redis.sadd("cron_jobs", "cron_job:nightly")
    redis.hset(
        "cron_job:nightly",
        mapping={
            "name": "nightly",
            "klass": "HardWorker",
            "cron": "30 2 * * * Europe/Paris",
            "args": '["bob",1]',
            "message": '{"retry":true,"queue":"low","class":"HardWorker","args":["bob",1]}',
            "status": "enabled",
            "active_job": "false",
            "last_enqueue_time": "2026-11-20 01:30:00 +0000",
        },
    )
    # When the periodic jobs are listed and the Ruby job is run now
    (job,) = api.PeriodicSet.all()
    jid = api.PeriodicSet.run_now("nightly")
    # Then it is listed with its schedule, times and queue, and its message was pushed as is
    assert (job.name, job.ours, job.job_class, job.queue, job.enabled) == ("nightly", False, "HardWorker", "low", True)
    assert job.last_enqueued_at == dt.datetime(2026, 11, 20, 1, 30, tzinfo=dt.UTC).timestamp()
    assert job.next_run_at is not None and job.next_run_at > job.server_now
    pushed = json.loads(redis.rpop("queue:low"))
    assert pushed["jid"] == jid and pushed["args"] == ["bob", 1] and pushed["class"] == "HardWorker"
    assert api.PeriodicSet.get("nightly").last_jid == jid


@pytest.mark.slow
def test_every_second_with_three_processes_runs_once_per_second(redis_server, redis):
    # Given a job every second, and three worker processes that all tick it
    overrides = {"PERIODIC": {"beat": {"class": RECORD, "every": 1, "args": ["beat"]}}}
    with WorkerProcess(["-P", "3", "-c", "2"], redis_url=redis_server.url, env={"JOBSAPP_TEST_OVERRIDES": json.dumps(overrides)}):
        # When they run for 10 seconds
        time.sleep(10)
        runs = redis.llen(RAN_KEY)
        job = api.PeriodicSet.get("beat")
    # Then the job ran about once a second, not once per process per second
    assert 8 <= runs <= 12, runs
    assert job is not None and job.ours and job.schedule == "every 1 s"
    assert job.last_outcome == "succeeded" and job.enqueued_count >= runs


def test_cli_lists_disables_enables_and_runs(redis):
    from io import StringIO

    from django.core.management import CommandError, call_command

    # Given a registered periodic job
    periodic.register(get_redis(), definition(every=30), server_now=server_now())
    # When the CLI disables it, lists it, enables it and runs it
    out = StringIO()
    call_command("jobs", "periodic", "disable", "report", stdout=out)
    call_command("jobs", "periodic", "--json", stdout=out)
    listed = json.loads(out.getvalue().split("\n", 1)[1])
    call_command("jobs", "periodic", "enable", "report", stdout=StringIO())
    call_command("jobs", "periodic", "run", "report", stdout=StringIO())
    # Then each took effect, and an unknown name is a clear error
    assert listed[0]["name"] == "report" and listed[0]["enabled"] is False and listed[0]["schedule"] == "every 30 s"
    assert api.PeriodicSet.get("report").enabled and redis.llen("queue:default") == 1
    with pytest.raises(CommandError, match="no periodic job 'nope'"):
        call_command("jobs", "periodic", "run", "nope", stdout=StringIO())


def test_the_decorator_declares_a_periodic_job_and_a_name_clash_is_a_check_error(settings):
    from jobsapp import Job, periodic_job
    from jobsapp.checks import check_periodic

    # Given a job class declared periodic with the decorator
    @periodic_job(cron="0 */2 * * *", args=[1], timezone="America/New_York")
    class Digest(Job):
        def perform(self, value):
            return value

    try:
        # When the definitions are read
        (declared,) = [each for each in periodic.definitions() if each.job_class is Digest]
        # Then it is named after the class, with its schedule
        assert declared.name == Digest.wire_name() and declared.schedule == "0 */2 * * * (America/New_York)"
        assert declared.args == [1] and declared.queue == "default"
        # and a settings entry of the same name is reported by the system check
        settings.JOBSAPP = {**settings.JOBSAPP, "PERIODIC": {Digest.wire_name(): {"class": RECORD, "every": 5}}}
        (error,) = check_periodic()
        assert error.id == "jobsapp.E010" and "both in settings and by @periodic_job" in error.msg
    finally:
        periodic._declared.pop(Digest.wire_name(), None)
        from jobsapp import registry

        registry.unregister(Digest.wire_name())


@pytest.mark.slow
def test_a_host_whose_clock_runs_ahead_runs_no_tick_early(redis_server, redis):
    # Given a worker whose wall clock runs 90 s ahead (tests/faults/clock.py), ticking a job every 2 s
    overrides = {"PERIODIC": {"skewed": {"class": RECORD, "every": 2, "args": ["skewed"]}}}
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.faults.settings",
        "JOBSAPP_TEST_CLOCK_OFFSET_SECONDS": "90",
        "JOBSAPP_TEST_OVERRIDES": json.dumps(overrides),
    }
    with WorkerProcess(["-c", "2"], env=env, redis_url=redis_server.url) as worker:
        assert float(redis.hget(worker.identity, "beat")) - time.time() > 80, "its clock really is ahead"
        # When it runs for 5 seconds
        time.sleep(5)
    # (read once it has stopped: a tick claimed while we read would otherwise be counted on one side only)
    now = server_now()
    ticks = [score for _, score in redis.zrange("cron_job:skewed:enqueued", 0, -1, withscores=True)]
    # Then every tick it claimed was due by the server's clock, and each became one job: run, or
    # still queued if it was pushed as the worker stopped
    assert ticks and max(ticks) <= now
    ran, queued = redis.llen(RAN_KEY), redis.llen("queue:default")
    assert 2 <= ran <= 4 and ran + queued == len(ticks)


def test_check_reports_every_bad_entry_and_a_cron_that_can_never_fire(settings):
    from jobsapp.checks import check_periodic

    # Given three entries: 30 February (a valid cron no date matches), 31 April, and a good one
    settings.JOBSAPP = {
        **settings.JOBSAPP,
        "PERIODIC": {
            "leap": {"class": RECORD, "cron": "0 2 30 2 *"},
            "april": {"class": RECORD, "cron": "0 2 31 4 *"},
            "fine": {"class": RECORD, "every": 5},
        },
    }
    # When the system check runs
    errors = check_periodic()
    # Then each bad entry has its own error saying it can never fire, and the good one none
    assert [error.id for error in errors] == ["jobsapp.E010", "jobsapp.E010"]
    assert "'leap'" in errors[0].msg and "can never fire" in errors[0].msg
    assert "'april'" in errors[1].msg and "can never fire" in errors[1].msg


def hostile_hash(redis, name: str) -> None:
    """A cron_job hash of ours whose numbers another client broke."""
    redis.hset(
        f"cron_job:{name}",
        mapping={
            "jobsapp_last_tick": "1e999",
            "jobsapp_enqueued_count": "nan",
            "jobsapp_last_enqueued_at": "inf",
            "jobsapp_last_finished_at": "9" * 400,
            "last_enqueue_time": "-inf",
        },
    )


def test_one_broken_entry_is_logged_once_and_skipped_while_the_others_keep_their_ticks(redis, caplog):
    # Given three entries ticked by one process: a cron no date matches (it got past the check),
    # a good job every second, and a good job whose hash another client broke (inf, nan, 400 digits)
    impossible = periodic.Definition(name="leap", job_class=definition(every=1).job_class, cron="0 2 30 2 *")
    good, hostile = definition(name="good", every=1), definition(name="hostile", every=1)
    now = server_now()
    scheduler = periodic.PeriodicScheduler(client=get_redis(), jobs=[impossible, good, hostile])
    for job in (good, hostile):
        periodic.register(get_redis(), job, server_now=now - 1)
    hostile_hash(redis, "hostile")
    # When the scheduler polls over three seconds
    with caplog.at_level("INFO", logger="jobsapp.periodic"):
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            time.sleep(min(scheduler.poll_once(), 0.5))
    # Then the good jobs ran about once a second, the broken hash was repaired on its first claim
    pushed = [json.loads(raw)["periodic"] for raw in redis.lrange("queue:default", 0, -1)]
    assert 2 <= pushed.count("good") <= 5, pushed
    assert 2 <= pushed.count("hostile") <= 5, pushed
    assert float(redis.hget("cron_job:hostile", "jobsapp_last_tick")) <= server_now()
    assert int(redis.hget("cron_job:hostile", "jobsapp_enqueued_count")) == pushed.count("hostile")
    # and each problem was logged once, not once per poll
    messages = [record.getMessage() for record in caplog.records]
    assert len([text for text in messages if text.startswith("periodic leap: skipped")]) == 1, messages
    assert len([text for text in messages if "'1e999', not a past tick" in text]) == 1, messages


@pytest.mark.standalone_only  # sidekiq-cron's layout, written as Ruby writes it
def test_a_malformed_hash_is_listed_as_malformed_by_the_api_and_the_cli(redis):
    from io import StringIO

    from django.core.management import call_command

    # Given a registered job whose hash another client broke, and a cron_jobs member that is a string
    periodic.register(get_redis(), definition(every=30), server_now=server_now())
    hostile_hash(redis, "report")
    redis.hset("cron_job:report", "jobsapp_every", "1" + "0" * 399)
    redis.sadd("cron_jobs", "cron_job:text")
    redis.set("cron_job:text", "not a hash")
    # When the API and the CLI list them
    jobs = {job.name: job for job in api.PeriodicSet.all()}
    as_json, as_table = StringIO(), StringIO()
    call_command("jobs", "periodic", "--json", stdout=as_json)
    call_command("jobs", "periodic", stdout=as_table)
    # Then both entries are listed, marked malformed, with no time read from the broken fields
    report = jobs["report"]
    assert set(report.malformed) >= {"jobsapp_last_tick", "jobsapp_enqueued_count", "jobsapp_last_enqueued_at", "jobsapp_every"}
    assert report.last_enqueued_at is None and report.last_finished_at is None and report.next_run_at is None
    assert report.enqueued_count == 0
    assert jobs["text"].malformed == ["the key is not a hash"]
    text = as_json.getvalue()
    listed, _ = json.JSONDecoder().raw_decode(text[text.index("[") :])
    assert {entry["name"]: bool(entry["malformed"]) for entry in listed} == {"report": True, "text": True}
    assert "malformed: " in as_table.getvalue()


@pytest.mark.parametrize(("registered_ago", "outcome"), [(1, "enqueued"), (60, "skipped")])
def test_a_short_interval_tick_after_missed_ticks_is_skipped_with_missed_skip(redis, registered_ago, outcome):
    # Given a job every second with "missed": "skip", whose last claimed tick is the one just
    # before the latest (no tick missed) or a minute old (the workers were down: 59 ticks missed)
    job = definition(every=1, missed="skip")
    now = server_now()
    periodic.register(get_redis(), job, server_now=now - registered_ago)
    # When the latest tick is claimed (it is less than a second late)
    claimed = periodic.claim(get_redis(), job, job.previous_tick(now), created_at=now)
    # Then it runs when no tick was missed, and is skipped after missed ticks
    assert claimed[1] == outcome
    assert redis.llen("queue:default") == (1 if outcome == "enqueued" else 0)


def test_running_now_a_job_whose_stored_message_is_broken_says_why(redis):
    from io import StringIO

    from django.core.management import CommandError, call_command

    # Given a sidekiq-cron entry whose message another client wrote with args that are not a list
    redis.sadd("cron_jobs", "cron_job:odd")
    redis.hset(
        "cron_job:odd", mapping={"name": "odd", "klass": "HardWorker", "cron": "* * * * *", "message": '{"class":"HardWorker","args":"x"}'}
    )
    # When it is run now through the API and the CLI, Then the reason is given and nothing is pushed
    with pytest.raises(ValueError, match="'odd': its stored message cannot be pushed"):
        api.PeriodicSet.run_now("odd")
    with pytest.raises(CommandError, match="cannot be pushed"):
        call_command("jobs", "periodic", "run", "odd", stdout=StringIO())
    assert redis.llen("queue:default") == 0
