"""The dashboard in headless Chromium (Debian's /usr/bin/chromium driven by Playwright): every
page renders with data in every state, the live overview updates, buttons act on Redis, confirm
dialogs guard destructive ones, and hostile job data never runs as script.

Screenshots of every page go to $JOBSAPP_SCREENSHOTS (default: the test's tmp dir); the README's
docs/dashboard-overview.png comes from this test.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from jobsapp import keys
from tests.jobsapp import sidekiq_data as data

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = '<img src=x onerror="window.__xss=1">'


@pytest.fixture
def screenshots(tmp_path) -> Path:
    directory = Path(os.environ.get("JOBSAPP_SCREENSHOTS") or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture
def page(browser, live_server, django_user_model):
    django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.errors = []
    tab.on("pageerror", lambda error: tab.errors.append(str(error)))
    tab.on("console", lambda message: tab.errors.append(message.text) if message.type == "error" else None)
    # Given a staff user who signs in through the login page the dashboard redirects to
    tab.goto(live_server.url + "/jobs/")
    assert "/admin/login/" in tab.url
    tab.fill("#id_username", "ops")
    tab.fill("#id_password", "pw-ops-123")
    tab.click("input[type=submit]")
    tab.wait_for_url(live_server.url + "/jobs/")
    tab.base = live_server.url
    tab.errors.clear()  # the admin login page's favicon 404 is not ours
    yield tab
    context.close()


def test_every_page_renders_and_the_overview_is_live(page, redis, screenshots):
    ids = data.populate(redis)
    hostile = data.job(HOSTILE, [HOSTILE], queue="default")
    data.add_to_set(redis, keys.RETRY, data.failed(hostile, error_class=HOSTILE, message=HOSTILE), time.time() + 30)
    # and a retained job that returned hostile text, for the Completed page
    from jobsapp import testing
    from tests.testapp.tasks import Add

    completed_jid = Add.perform_async(HOSTILE, "")
    testing.execute(json.loads(redis.lpop(keys.queue("default"))))

    # The overview: counters, both charts drawn as SVG, Redis facts
    page.goto(page.base + "/jobs/?poll=1")
    assert page.inner_text("[data-stat=processed]") == "123\u2009456"
    page.wait_for_selector("#history-chart svg polyline.processed", state="attached")
    assert page.locator("#history-chart svg circle.processed").count() == 30
    page.wait_for_selector("#realtime-chart svg polyline.processed", state="attached")
    # When the counters move in Redis, the cards and the realtime chart follow without a reload
    redis.incrby(keys.STAT_PROCESSED, 1000)
    page.wait_for_function("document.querySelector('[data-stat=processed]').textContent === '124\u2009456'", timeout=5000)
    assert "Live: updated" in page.inner_text("#live-status")
    redis.incrby(keys.STAT_PROCESSED, 400)
    redis.incrby(keys.STAT_FAILED, 30)
    page.wait_for_function("document.querySelectorAll('#realtime-chart circle.processed').length >= 3", timeout=5000)
    page.screenshot(path=str(screenshots / "dashboard-overview.png"), full_page=True)

    urls = {
        "queues": "/jobs/queues/",
        "queue": "/jobs/queues/default",
        "busy": "/jobs/busy/",
        "scheduled": "/jobs/sets/scheduled/",
        "retries": "/jobs/sets/retries/",
        "dead": "/jobs/sets/dead/",
        "job": f"/jobs/jobs/{ids['retry']}/",
        "running-job": f"/jobs/jobs/{ids['running']}/",
        "completed": "/jobs/completed/",
        "completed-job": f"/jobs/jobs/{completed_jid}/",
    }
    for name, url in urls.items():
        response = page.goto(page.base + url)
        assert response.status == 200, url
        assert page.locator("main h1").count() == 1, url
        page.screenshot(path=str(screenshots / f"dashboard-{name}.png"), full_page=True)
    assert "Net::ReadTimeout" in page.goto(page.base + urls["retries"]).text()
    assert page.evaluate("window.__xss") is None, "hostile job data never runs"
    assert HOSTILE in page.inner_text("main"), "it is shown as text"
    assert "hunter2" not in page.goto(page.base + urls["queue"]).text()
    completed_text = page.goto(page.base + urls["completed"]).text()
    assert completed_jid in completed_text and page.evaluate("window.__xss") is None, "a retained value is shown as text"
    assert page.errors == []


def test_buttons_act_on_redis_and_confirm_guards_destructive_ones(page, redis):
    ids = data.populate(redis)

    # Pause then resume a queue
    page.goto(page.base + "/jobs/queues/")
    page.click("tr[data-queue=default] button[value=pause]")
    page.wait_for_selector(".messages li")
    assert redis.sismember(keys.PAUSED, "default")
    page.click("tr[data-queue=default] button[value=resume]")
    page.wait_for_selector("tr[data-queue=default] button[value=pause]")
    assert not redis.sismember(keys.PAUSED, "default")

    # Clear is confirmed: dismissing the dialog changes nothing, accepting clears
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("tr[data-queue=default] button[value=clear]")
    assert redis.llen(keys.queue("default")) == 30
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("tr[data-queue=default] button[value=clear]")
    page.wait_for_selector(".messages li")
    assert redis.llen(keys.queue("default")) == 0

    # Retry now on a selected retry-set entry
    page.goto(page.base + "/jobs/sets/retries/")
    page.check("[data-select-all]")
    page.click("#selected-form button[value=retry]")
    page.wait_for_selector(".messages li")
    assert redis.zcard(keys.RETRY) == 0
    assert json.loads(redis.lindex(keys.queue("default"), 0))["jid"] == ids["retry"]

    # Kill all scheduled (confirmed), then delete the dead from the job page
    page.goto(page.base + "/jobs/sets/scheduled/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#all-form button[value=kill]")
    page.wait_for_selector(".messages li")
    assert redis.zcard(keys.SCHEDULE) == 0 and redis.zcard(keys.DEAD) == 2
    page.goto(page.base + f"/jobs/jobs/{ids['dead']}/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[value=delete]")
    page.wait_for_selector(".messages li")
    assert redis.zcard(keys.DEAD) == 1

    # Quiet and stop a process through its signals list
    page.goto(page.base + "/jobs/busy/")
    page.click(f"tr[data-identity='{ids['identity']}'] button[value=quiet]")
    page.wait_for_selector(".messages li")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click(f"tr[data-identity='{ids['identity']}'] button[value=stop]")
    page.wait_for_selector(".messages li")
    assert redis.lrange(keys.signals(ids["identity"]), 0, -1) == [b"TERM", b"TSTP"]

    # Jump to a job by jid from the header
    page.fill("form.jump input", ids["running"])
    page.press("form.jump input", "Enter")
    page.wait_for_url(f"**/jobs/jobs/{ids['running']}/")
    assert "Running in" in page.inner_text("main")
    assert page.errors == []


def test_periodic_and_limits_pages_show_and_act(page, redis, screenshots):
    from jobsapp import limiter, periodic
    from jobsapp.connection import get_redis

    # Given one periodic job of ours, a Ruby sidekiq-cron job, and a limiter with a slot held
    connection = get_redis()
    ours = periodic.build("nightly-report", {"class": "tests.testapp.jobs.Record", "cron": "0 2 * * *", "timezone": "Europe/Paris"})
    periodic.register(connection, ours, server_now=periodic.server_time(connection))
    redis.sadd("cron_jobs", "cron_job:ruby-digest")
    redis.hset(
        "cron_job:ruby-digest", mapping={"name": "ruby-digest", "klass": "DigestWorker", "cron": "*/10 * * * *", "status": "enabled"}
    )
    limiter.concurrent("partner-api", 3, wait_timeout=0).acquire()
    # When the Periodic page is opened and "Run now" then "Disable" are pressed for our job
    page.goto(page.base + "/jobs/periodic/")
    row = page.locator("tr[data-periodic='nightly-report']")
    assert "0 2 * * * (Europe/Paris)" in row.inner_text() and "sidekiq-cron" in page.inner_text("tr[data-periodic='ruby-digest']")
    row.locator("button[value=run]").click()
    page.wait_for_selector(".messages")
    assert "Enqueued nightly-report now" in page.inner_text(".messages")
    page.locator("tr[data-periodic='nightly-report'] button[value=disable]").click()
    page.wait_for_selector("tr[data-periodic='nightly-report'] button[value=enable]")
    page.screenshot(path=str(screenshots / "dashboard-periodic.png"), full_page=True)
    # Then the job was pushed once and is disabled in Redis
    assert redis.llen("queue:default") == 1 and redis.hget("cron_job:nightly-report", "status") == b"disabled"
    # And the Limits page shows the limiter's use
    page.goto(page.base + "/jobs/limits/")
    assert "partner-api" in page.inner_text("tr[data-limiter='partner-api']")
    page.screenshot(path=str(screenshots / "dashboard-limits.png"), full_page=True)
    assert page.errors == []
