"""The progress page in a real headless Chromium (Debian's, driven by Playwright's Python package):
it polls the API, shows the bar, the counts and the failed and errored jobs with their messages,
updates live while jobs settle, and stops polling once the task is finished."""

from __future__ import annotations

import time
from urllib.parse import urlparse

import pytest

from tests.tracking.jobs import Succeeds
from tracking import launching, transitions
from tracking.models import Event, Task

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_page_follows_a_task_live_and_stops_when_it_finishes(browser, live_server, client, django_user_model, settings):
    settings.TRACKING = {"PAGE_POLL_INTERVAL_MILLISECONDS": 150}
    # Given a task of 4 jobs, one already failed for a business reason
    owner = django_user_model.objects.create_user("ann")
    task = Task.objects.launch(Succeeds, [[index] for index in range(4)], owner=owner, name="Sign 4 products up")
    jobs = list(Event.objects.filter(task=task).order_by("id").values_list("job_id", flat=True))
    launching.record(jobs[0], transitions.FAILED_ON_PURPOSE, message="SKU-0002: seller not qualified")
    client.force_login(owner)
    context = browser.new_context()
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "domain": urlparse(live_server.url).hostname,
          "path": "/"}]
    )  # fmt: skip
    page = context.new_page()
    summary_statuses: list[int] = []
    page.on(
        "response", lambda response: summary_statuses.append(response.status) if "/api/tasks/" in response.url
        and "/events/" not in response.url else None,
    )  # fmt: skip
    # When the owner opens the page
    page.goto(f"{live_server.url}/tasks/{task.pk}/")
    # Then it shows the counts, the bar and the failed job with its reason
    page.wait_for_function("document.getElementById('count-failed').textContent === '1'")
    assert page.text_content("#task-name") == "Sign 4 products up"
    assert page.text_content("#count-enqueue") == "3"
    # (the failed jobs are fetched after the summary that shows them counted)
    page.wait_for_function("document.getElementById('problems').textContent.includes('SKU-0002: seller not qualified')")
    assert page.get_attribute("#progress-bar", "aria-valuenow") == "25"
    # And while nothing changes it polls with If-None-Match and gets 304s
    page.wait_for_timeout(600)
    assert 304 in summary_statuses
    # When jobs run, one crashes for good, and the rest finish
    launching.record(jobs[1], transitions.START)
    page.wait_for_function("document.getElementById('count-working').textContent === '1'")
    assert page.text_content("#task-status") == "running"
    launching.record(jobs[1], transitions.FINISHED)
    launching.record(jobs[2], transitions.CRASHED, message="KeyError: 'price'")
    launching.record(jobs[2], transitions.DEAD, message="retries exhausted")
    launching.record(jobs[3], transitions.FINISHED)
    # Then the page shows the finished task and both problem jobs, and stops polling
    page.wait_for_function("document.getElementById('task-progress').dataset.polling === 'stopped'", timeout=10_000)
    assert page.text_content("#task-status") == "finished"
    assert page.get_attribute("#progress-bar", "aria-valuenow") == "100"
    assert page.text_content("#count-finish") == "2" and page.text_content("#count-error") == "1"
    problems = page.text_content("#problems")
    assert "KeyError" in problems and "retries exhausted" in problems and "seller not qualified" in problems
    assert "'price'" not in problems  # a crash's text is for staff; its owner sees the exception class
    requests_when_finished = len(summary_statuses)
    time.sleep(1.0)
    assert len(summary_statuses) == requests_when_finished
    context.close()


def test_page_of_someone_elses_task_is_404(browser, live_server, client, django_user_model):
    owner = django_user_model.objects.create_user("ann")
    intruder = django_user_model.objects.create_user("eve")
    task = Task.objects.launch(Succeeds, [[1]], owner=owner)
    client.force_login(intruder)
    context = browser.new_context()
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "domain": urlparse(live_server.url).hostname,
          "path": "/"}]
    )  # fmt: skip
    response = context.new_page().goto(f"{live_server.url}/tasks/{task.pk}/")
    assert response.status == 404
    context.close()


def test_page_counts_reported_progress_and_colours_failures(browser, live_server, client, django_user_model, settings):
    settings.TRACKING = {"PAGE_POLL_INTERVAL_MILLISECONDS": 150}
    # Given a one-job task whose job is running and reports 3 of 4 batches
    owner = django_user_model.objects.create_user("ann")
    task = Task.objects.launch(Succeeds, [[1]], owner=owner, name="Export")
    [jid] = Event.objects.filter(task=task).values_list("job_id", flat=True)
    launching.record(jid, transitions.START)
    entry = transitions.message_entry(transitions.WORKING, "batch 3 of 4")
    entry["done"], entry["total"] = 3, 4
    launching.record(jid, transitions.MESSAGES_ONLY, entries=[entry])
    client.force_login(owner)
    context = browser.new_context()
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "domain": urlparse(live_server.url).hostname, "path": "/"}]
    )
    page = context.new_page()
    # When its owner opens the page, Then the bar shows 75 % and the job's latest message
    page.goto(f"{live_server.url}/tasks/{task.pk}/")
    page.wait_for_function("document.getElementById('progress-bar').getAttribute('aria-valuenow') === '75'")
    assert "batch 3 of 4" in page.text_content("#running")
    # When the job then fails on purpose, Then the whole bar is the failed share, in the admin's orange
    launching.record(jid, transitions.FAILED_ON_PURPOSE, message="no export for you")
    page.wait_for_function("document.getElementById('task-progress').dataset.polling === 'stopped'", timeout=10_000)
    assert page.get_attribute("#progress-bar", "aria-valuenow") == "100"
    assert page.evaluate("document.getElementById('progress-failed').style.width") == "100%"
    assert page.evaluate("getComputedStyle(document.getElementById('progress-failed')).backgroundColor") == "rgb(217, 130, 43)"
    assert page.evaluate("document.getElementById('progress-fill').style.width") == "0%"
    assert page.is_hidden("#running-section")
    context.close()
