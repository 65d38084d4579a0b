"""Periodic jobs share sidekiq-cron 1.8's Redis layout (Debian's ruby-sidekiq-cron): a Ruby app's
cron jobs show up in our API, ours in sidekiq-cron's, and a Ruby poller and ours never both
enqueue the same tick."""

from __future__ import annotations

import json
import os

import pytest

from jobsapp import api, periodic
from jobsapp.connection import get_redis
from tests.interop.conftest import run_ruby

pytestmark = pytest.mark.interop


@pytest.fixture(autouse=True)
def _needs_sidekiq_cron(redis_server) -> None:
    import subprocess

    probe = subprocess.run(["ruby", "-e", 'require "sidekiq/cron/job"'], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        reason = "sidekiq-cron is not installed (Debian: apt-get install ruby-sidekiq-cron)"
        if os.environ.get("JOBSAPP_REQUIRE_INTEROP") == "1":  # CI: bin/test installs it, so missing is a failure
            pytest.fail(reason)
        pytest.skip(reason)


def test_ruby_cron_jobs_and_ours_see_each_other(redis_server, redis):
    # Given a cron job saved by a Ruby app, and one of ours registered by a worker
    run_ruby("cron.rb", "create", "ruby-nightly", "30 2 * * *", "HardWorker", "low", redis_url=redis_server.url)
    ours = periodic.build("report", {"class": "tests.testapp.jobs.Record", "cron": "*/5 * * * *", "timezone": "Europe/Paris"})
    periodic.register(get_redis(), ours, server_now=periodic.server_time(get_redis()))
    # When each side lists the cron jobs
    ruby_sees = {job["name"]: job for job in json.loads(run_ruby("cron.rb", "list", redis_url=redis_server.url))}
    we_see = {job.name: job for job in api.PeriodicSet.all()}
    # Then both see both: Ruby parses our cron with its zone, we read Ruby's schedule and queue
    assert ruby_sees["report"]["valid"] and ruby_sees["report"]["cron"] == "*/5 * * * * Europe/Paris"
    assert ruby_sees["report"]["status"] == "enabled" and ruby_sees["report"]["klass"] == "tests.testapp.jobs.Record"
    ruby_job = we_see["ruby-nightly"]
    assert not ruby_job.ours and ruby_job.schedule == "30 2 * * *" and ruby_job.queue == "low" and ruby_job.next_run_at
    # and a job disabled from our side is disabled for Ruby too
    api.PeriodicSet.set_enabled("ruby-nightly", False)
    statuses = {job["name"]: job["status"] for job in json.loads(run_ruby("cron.rb", "list", redis_url=redis_server.url))}
    assert statuses["ruby-nightly"] == "disabled"


def test_a_tick_claimed_by_us_is_not_enqueued_again_by_a_ruby_poller(redis_server, redis):
    # Given one of our minutely jobs, registered a while ago, whose current tick we claim
    job = periodic.build("minutely", {"class": "tests.testapp.jobs.Record", "cron": "* * * * *", "args": ["py"]})
    now = periodic.server_time(get_redis())
    periodic.register(get_redis(), job, server_now=now - 600)
    pushed, outcome, _ = periodic.claim(get_redis(), job, job.previous_tick(now), created_at=now)
    # When a Ruby sidekiq-cron poller tests the same tick (at the same instant: a minute boundary
    # crossed between the two would make it a different tick)
    ruby_says = run_ruby("cron.rb", "tick", "minutely", str(now), redis_url=redis_server.url).strip()
    # Then only our claim enqueued it
    assert (pushed, outcome) == (True, "enqueued") and ruby_says == "skipped"
    assert redis.llen("queue:default") == 1


def test_a_tick_a_ruby_poller_enqueued_is_not_claimed_again_by_us(redis_server, redis):
    # Given a Ruby app's minutely job (so its Ruby poller ticks it), which the poller enqueues now
    run_ruby("cron.rb", "create", "ruby-minutely", "* * * * *", "HardWorker", "default", redis_url=redis_server.url)
    redis.delete("cron_job:ruby-minutely:enqueued")  # saved before the current minute (no baseline tick)
    now = periodic.server_time(get_redis())  # one instant for both sides, so no minute boundary falls between
    assert run_ruby("cron.rb", "tick", "ruby-minutely", str(now), redis_url=redis_server.url).strip() == "enqueued"
    # When our process claims that same tick for a definition of the same name
    job = periodic.build("ruby-minutely", {"class": "HardWorker", "cron": "* * * * *"})
    pushed, outcome, _ = periodic.claim(get_redis(), job, job.previous_tick(now), created_at=now)
    # Then it sees the tick as done: one job in all
    assert (pushed, outcome) == (False, "done")
    assert redis.llen("queue:default") == 1
