"""Sidekiq 6.4's own Web UI renders what our processes write.

Given a real ``manage.py runworkers`` process that is busy, has a job in the retry set and one in
the dead set, when Ruby renders Sidekiq::Web's pages (the Rack app itself, through
Rack::MockRequest: the same code a browser would reach), then the Busy page lists our process
(identity, tag, busy job), and the Retries and Dead pages list our failed jobs with their errors.
"""

from __future__ import annotations

import html
import json

import pytest

from tests.interop.conftest import WORKER_SETTINGS, run_ruby
from tests.interop.jobs import RELEASE_KEY, AlwaysFails, Blocks, DiesAtOnce
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.interop


def render(redis_url: str, *paths: str) -> dict[str, dict]:
    pages = json.loads(run_ruby("web.rb", *paths, redis_url=redis_url))
    for path, page in pages.items():
        assert page["status"] == 200, f"Sidekiq::Web {path} answered {page['status']}"
    return {path: {**page, "text": html.unescape(page["body"])} for path, page in pages.items()}


def test_sidekiq_web_ui_lists_our_processes_busy_jobs_retries_and_dead(redis_server, redis):
    with WorkerProcess(["-c", "3", "-g", "py-interop", "-t", "5"], env=WORKER_SETTINGS, redis_url=redis_server.url) as worker:
        # Given our worker is busy with one job and has filed a retry and a dead job
        AlwaysFails.perform_async("for the web ui")
        DiesAtOnce.perform_async("for the morgue")
        Blocks.perform_async("busy for the web ui")
        wait_until(lambda: redis.zcard("retry") == 1 and redis.zcard("dead") == 1, message="failures filed")
        wait_until(lambda: redis.hlen(f"{worker.identity}:workers") == 1, timeout_seconds=12, message="the busy job beaten")
        # When Sidekiq's Web UI renders its pages
        pages = render(redis_server.url, "/", "/busy", "/retries", "/morgue")
        redis.rpush(RELEASE_KEY, "go")
    # Then Busy shows our process, its tag and the job it runs
    busy = pages["/busy"]["text"]
    hostname, pid, _ = worker.identity.split(":")
    assert f"{hostname}:{pid}" in busy and "py-interop" in busy
    assert "tests.interop.jobs.Blocks" in busy and "busy for the web ui" in busy
    # And Retries and Dead show our failures with their error class and message
    retries = pages["/retries"]["text"]
    assert "tests.interop.jobs.AlwaysFails" in retries and "ValueError" in retries
    morgue = pages["/morgue"]["text"]
    assert "tests.interop.jobs.DiesAtOnce" in morgue and "python job died on purpose: for the morgue" in morgue
