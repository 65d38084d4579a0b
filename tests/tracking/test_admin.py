"""Admin: task list with counts and progress, filters and search, the failed/errored inline,
event pages, and the action that retries a task's errored jobs through the engine."""

from __future__ import annotations

import pytest

from tests.tracking.conftest import pop_item, run_item
from tests.tracking.jobs import Crashes, Succeeds
from tracking import launching, transitions
from tracking.models import Event, Task


def finished_task(size: int = 3, **kwargs) -> Task:
    task = Task.objects.launch(Succeeds, [[index] for index in range(size)], **kwargs)
    ids = list(Event.objects.filter(task=task).order_by("id").values_list("job_id", flat=True))
    for job_id in ids[:-2]:
        launching.record(job_id, transitions.FINISHED)
    launching.record(ids[-2], transitions.FAILED_ON_PURPOSE, message="seller not qualified")
    launching.record(ids[-1], transitions.CRASHED, message="KeyError: 'price'")
    launching.record(ids[-1], transitions.DEAD, message="retries exhausted")
    task.refresh_from_db()
    return task


@pytest.mark.django_db
def test_task_list_shows_counts_progress_and_filters(admin_client):
    done = finished_task(name="promotion")
    pending = Task.objects.launch(Succeeds, [[1]], name="import")
    page = admin_client.get("/admin/tracking/task/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "promotion" in html and "import" in html and "100.0% settled, 2 failed or errored" in html
    finished_only = admin_client.get("/admin/tracking/task/?status=finished").content.decode()
    assert done.pk in finished_only and pending.pk not in finished_only
    pending_only = admin_client.get("/admin/tracking/task/?status=pending").content.decode()
    assert pending.pk in pending_only and done.pk not in pending_only
    by_id = admin_client.get(f"/admin/tracking/task/?q={done.pk}").content.decode()
    assert done.pk in by_id and pending.pk not in by_id


@pytest.mark.django_db
def test_task_page_lists_its_failed_and_errored_jobs(admin_client):
    task = finished_task(size=4)
    html = admin_client.get(f"/admin/tracking/task/{task.pk}/change/").content.decode()
    assert "seller not qualified" in html and "KeyError: &#x27;price&#x27;" in html and "retries exhausted" in html
    finished_job = Event.objects.filter(task=task, status="finish").first().job_id
    assert finished_job not in html


@pytest.mark.django_db
def test_event_list_filters_and_search_and_readable_messages(admin_client):
    task = finished_task(size=3)
    failed = Event.objects.get(task=task, status="failed")
    by_status = admin_client.get("/admin/tracking/event/?status__exact=failed").content.decode()
    assert failed.job_id in by_status and "seller not qualified" in by_status
    assert Event.objects.get(task=task, status="error").job_id not in by_status
    by_task = admin_client.get(f"/admin/tracking/event/?task__id__exact={task.pk}")
    assert by_task.status_code == 200
    # one task's list is counted from its counters, and the task's page links to it
    assert "3 events" in by_task.content.decode()
    assert "1 event" in admin_client.get(f"/admin/tracking/event/?task__id__exact={task.pk}&status__exact=failed").content.decode()
    task_page = admin_client.get(f"/admin/tracking/task/{task.pk}/change/").content.decode()
    assert f"/admin/tracking/event/?task__id__exact={task.pk}" in task_page
    assert admin_client.get(f"/admin/tracking/event/?q={failed.job_id}").content.decode().count(failed.job_id) >= 1
    detail = admin_client.get(f"/admin/tracking/event/{failed.pk}/change/").content.decode()
    assert "seller not qualified" in detail and "&quot;args&quot;" in detail


@pytest.mark.django_db(transaction=True)
def test_retry_action_pushes_errored_jobs_again_under_the_same_jid(admin_client, redis):
    # Given a finished task whose one job died after crashing
    task = Task.objects.launch(Crashes, [[1], [2]])
    first, second = (pop_item(redis), pop_item(redis))
    run_item({**first, "class": Succeeds.wire_name()})
    with pytest.raises(ZeroDivisionError):
        run_item(second)
    launching.record(second["jid"], transitions.DEAD, message="retries exhausted")
    task.refresh_from_db()
    assert task.status == "finished"
    # When an admin retries its errored jobs
    response = admin_client.post("/admin/tracking/task/", {"action": "retry_errored_jobs", "_selected_action": [task.pk]}, follow=True)
    assert "Retried 1 errored job(s)." in response.content.decode()
    # Then the event is back to enqueue, the task running again, and the job is in Redis with its jid
    event = Event.objects.get(job_id=second["jid"])
    assert (event.status, event.is_final) == ("enqueue", False)
    assert event.messages[-1]["message"] == "retried by admin"
    task.refresh_from_db()
    assert task.finished_at is None and task.counts["error"] == 0 and task.counts["enqueue"] == 1
    again = pop_item(redis)
    assert again["jid"] == second["jid"] and again["args"] == [2] and again["task_id"] == task.pk
    assert Event.objects.count() == 2
    # And when it succeeds this time the task finishes again
    run_item({**again, "class": Succeeds.wire_name()})
    task.refresh_from_db()
    assert task.status == "finished" and task.counts["finish"] == 2


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_task_list_fits_a_1280_pixel_screen(browser, live_server, client, django_user_model, settings):
    settings.TRACKING = {"LAUNCH_INLINE_JOBS": 2000}  # the events written inline
    # Given tasks with long names, a long owner name and four-digit counts
    from urllib.parse import urlparse

    owner = django_user_model.objects.create_user("a-rather-long-username", is_staff=True, is_superuser=True)
    for index in range(2):
        task = Task.objects.launch(Succeeds, [[number] for number in range(1234)], owner=owner, name=f"Import the catalogue {index}")
        first = Event.objects.filter(task=task).values_list("job_id", flat=True).first()
        launching.record(first, transitions.FAILED_ON_PURPOSE, message="x")
    client.force_login(owner)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "domain": urlparse(live_server.url).hostname, "path": "/"}]
    )
    page = context.new_page()
    # When staff open the task list at 1280 px (the admin's navigation and filters open)
    page.goto(f"{live_server.url}/admin/tracking/task/")
    # Then no column is cut off: the results box does not scroll sideways
    scroll_width, client_width = page.evaluate(
        "(() => { const r = document.querySelector('.results'); return [r.scrollWidth, r.clientWidth]; })()"
    )
    assert scroll_width <= client_width, (scroll_width, client_width)
    assert "1 / 1,234 settled" in page.text_content("#result_list") and "1 failed" in page.text_content("#result_list")
