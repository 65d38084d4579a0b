"""The tracking API of docs/tracking-api.md: shapes, owner scoping, 404s, pagination, filters,
ETag/304, throttling, authentication and the OpenAPI schema."""

from __future__ import annotations

import pytest
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.tracking.jobs import Succeeds
from tracking import launching, transitions
from tracking.models import Event, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def ann(django_user_model):
    return django_user_model.objects.create_user("ann", password="pw-ann-123")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="pw-bob-123")


@pytest.fixture
def api(ann) -> APIClient:
    client = APIClient()
    client.force_authenticate(ann)
    return client


def make_task(owner, job_class=Succeeds, size: int = 3, **kwargs) -> Task:
    return Task.objects.launch(job_class, [[index] for index in range(size)], owner=owner, **kwargs)


def job_ids(task: Task) -> list[str]:
    return list(Event.objects.filter(task=task).order_by("id").values_list("job_id", flat=True))


def test_summary_has_the_contract_shape(api, ann):
    task = make_task(ann, size=4, name="sign up")
    first, second, third, _ = job_ids(task)
    launching.record(first, transitions.START)
    launching.record(first, transitions.FINISHED)
    launching.record(second, transitions.FAILED_ON_PURPOSE, message="seller not qualified")
    launching.record(third, transitions.START)
    response = api.get(f"/api/tasks/{task.pk}/")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"id", "name", "status", "total", "counts", "progress", "created_at", "updated_at", "finished_at", "cancelled_at"}
    assert body["id"] == task.pk and body["name"] == "sign up" and body["status"] == "running"
    assert body["total"] == 4 and body["progress"] == 0.5 and body["finished_at"] is None and body["cancelled_at"] is None
    assert body["counts"] == {"enqueue": 1, "working": 1, "finish": 1, "failed": 1, "error": 0, "cancelled": 0}


def test_list_is_the_callers_tasks_newest_first_and_paginated(api, ann, bob, settings):
    settings.TRACKING = {"API_PAGE_SIZE": 2}
    mine = [make_task(ann, size=1, name=f"mine {index}") for index in range(3)]
    make_task(bob, size=1, name="theirs")
    page_one = api.get("/api/tasks/").json()
    assert page_one["count"] == 3
    assert [row["name"] for row in page_one["results"]] == ["mine 2", "mine 1"]
    page_two = api.get(page_one["next"]).json()
    assert [row["id"] for row in page_two["results"]] == [mine[0].pk]
    assert api.get("/api/tasks/?page_size=1").json()["results"][0]["name"] == "mine 2"


@pytest.mark.parametrize(
    "bad_id",
    ["0" * 32, "nope", "x" * 500, "%00", "..%2F..%2Fetc", "'; DROP TABLE tracking_task; --", "ü" * 40, " "],
)
def test_bad_task_and_event_ids_are_404_never_500(api, bad_id):
    for url in (f"/api/tasks/{bad_id}/", f"/api/tasks/{bad_id}/events/", f"/api/events/{bad_id}/"):
        response = api.get(url)
        assert response.status_code == 404, (url, response.status_code)


def test_another_users_task_and_events_answer_404_like_missing_ones(api, bob):
    theirs = make_task(bob)
    jid = job_ids(theirs)[0]
    missing = api.get("/api/tasks/" + "0" * 32 + "/")
    for url in (f"/api/tasks/{theirs.pk}/", f"/api/tasks/{theirs.pk}/events/", f"/api/events/{jid}/"):
        response = api.get(url)
        assert response.status_code == 404
        assert response.json() == missing.json()
    assert api.get("/api/tasks/").json()["count"] == 0


def test_events_are_paginated_and_filtered_by_status(api, ann, settings):
    settings.TRACKING = {"API_PAGE_SIZE": 2}
    task = make_task(ann, size=5)
    ids = job_ids(task)
    launching.record(ids[1], transitions.FAILED_ON_PURPOSE, message="no stock")
    launching.record(ids[3], transitions.CRASHED, message="KeyError: 'x'")
    launching.record(ids[3], transitions.DEAD, message="retries exhausted")
    everything = api.get(f"/api/tasks/{task.pk}/events/").json()
    assert everything["count"] == 5 and [row["job_id"] for row in everything["results"]] == ids[:2]
    failed = api.get(f"/api/tasks/{task.pk}/events/?status=failed").json()
    assert [row["job_id"] for row in failed["results"]] == [ids[1]]
    row = failed["results"][0]
    assert set(row) == {"job_id", "status", "params", "messages", "attempts", "updated_at"}
    assert row["params"] == {"args": [1]} and row["messages"][-1]["message"] == "no stock"
    assert set(row["messages"][-1]) == {"at", "status", "message"}
    both = api.get(f"/api/tasks/{task.pk}/events/?status=failed,error").json()
    assert [row["job_id"] for row in both["results"]] == [ids[1], ids[3]]


def test_an_unknown_status_filter_is_a_400(api, ann):
    task = make_task(ann, size=1)
    response = api.get(f"/api/tasks/{task.pk}/events/?status=done")
    assert response.status_code == 400 and "unknown status 'done'" in response.json()["status"]


def test_one_event_by_job_id(api, ann):
    task = make_task(ann, size=2)
    jid = job_ids(task)[1]
    launching.record(jid, transitions.START)
    body = api.get(f"/api/events/{jid}/").json()
    assert body["job_id"] == jid and body["status"] == "working" and body["attempts"] == 1


def test_summary_is_one_query_however_many_events(api, ann, django_assert_num_queries):
    small = make_task(ann, size=1)
    large = make_task(ann, size=2000)
    for task in (small, large):
        with django_assert_num_queries(1):
            assert api.get(f"/api/tasks/{task.pk}/").status_code == 200


def test_a_running_tasks_summary_reads_its_reported_fractions_in_the_same_statement(api, ann, django_assert_num_queries):
    # Given a task with one job finished and one running at "batch 1 of 2"
    task = make_task(ann, size=4)
    first, second, _, _ = job_ids(task)
    launching.record(first, transitions.START)
    launching.record(first, transitions.FINISHED)
    launching.record(second, transitions.START)
    launching.record(second, transitions.MESSAGES_ONLY, entries=[progress_entry(1, 2)])
    # When it is polled, Then its progress counts the fraction: in the summary's one statement on
    # PostgreSQL (a second, on the partial index, where a query costs no round trip: SQLite)
    with django_assert_num_queries(1 if connection.vendor == "postgresql" else 2):
        body = api.get(f"/api/tasks/{task.pk}/").json()
    assert body["status"] == "running" and body["progress"] == 0.375
    # And once every job settled, the summary is one statement everywhere, and says so
    for jid in job_ids(task)[1:]:
        launching.record(jid, transitions.FINISHED)
    with django_assert_num_queries(1):
        body = api.get(f"/api/tasks/{task.pk}/").json()
    assert body["progress"] == 1.0 and body["counts"]["finish"] == 4


def test_unchanged_summary_answers_304_to_if_none_match(api, ann):
    task = make_task(ann, size=2)
    first = api.get(f"/api/tasks/{task.pk}/")
    etag = first["ETag"]
    assert etag
    # While nothing changes, a repeated poll is 304 without a body
    again = api.get(f"/api/tasks/{task.pk}/", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and not again.content and again["ETag"] == etag
    # When a job starts, the ETag changes and the summary is sent again
    launching.record(job_ids(task)[0], transitions.START)
    changed = api.get(f"/api/tasks/{task.pk}/", HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] != etag
    assert changed.json()["counts"]["working"] == 1


def test_requests_over_the_rate_are_429(api, ann, settings):
    settings.TRACKING = {"API_THROTTLE_RATE": "3/min"}
    task = make_task(ann, size=1)
    codes = [api.get(f"/api/tasks/{task.pk}/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]


def test_anonymous_callers_are_refused(ann):
    task = make_task(ann, size=1)
    response = APIClient().get(f"/api/tasks/{task.pk}/")
    assert response.status_code in (401, 403)


def test_token_and_session_authentication(ann):
    task = make_task(ann, size=1)
    token = Token.objects.create(user=ann)
    by_token = APIClient()
    by_token.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert by_token.get(f"/api/tasks/{task.pk}/").status_code == 200
    by_session = APIClient()
    assert by_session.login(username="ann", password="pw-ann-123")
    assert by_session.get(f"/api/tasks/{task.pk}/").status_code == 200


def test_openapi_schema_describes_the_endpoints(api):
    response = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    paths = schema["paths"]
    for path in ("/api/tasks/", "/api/tasks/{id}/", "/api/tasks/{id}/events/", "/api/events/{job_id}/", "/api/tasks/{id}/cancel/"):
        assert path in paths, sorted(paths)
    assert set(paths["/api/tasks/{id}/cancel/"]) == {"post"}
    assert "cancelled" in schema["components"]["schemas"]["Counts"]["properties"]
    task_schema = schema["components"]["schemas"]["Task"]["properties"]
    assert {"counts", "progress", "status"} <= set(task_schema)


def test_progress_page_is_the_owners_only(client, ann, bob):
    task = make_task(ann, size=1)
    assert client.get(f"/tasks/{task.pk}/").status_code == 302  # to the login page
    client.force_login(bob)
    assert client.get(f"/tasks/{task.pk}/").status_code == 404
    assert client.get("/tasks/" + "x" * 300 + "/").status_code == 404
    client.force_login(ann)
    page = client.get(f"/tasks/{task.pk}/")
    assert page.status_code == 200
    assert f'data-summary-url="/api/tasks/{task.pk}/"'.encode() in page.content


def test_crash_text_is_shown_to_staff_but_cut_to_its_class_for_the_owner():
    from tracking.serializers import crash_summary

    assert crash_summary("OperationalError: password authentication failed for user app") == "OperationalError"
    assert crash_summary("not run again: killed (HTTPError: 401 for https://x/?api_key=s3cret)") == "not run again: killed (HTTPError)"
    assert crash_summary("retries exhausted") == "retries exhausted"


def test_crash_text_reaches_staff_but_only_its_class_reaches_the_owner(api, ann, django_user_model):
    # Given a job that crashed with a secret in its message
    task = make_task(ann)
    first = job_ids(task)[0]
    launching.record(first, transitions.START)
    launching.record(first, transitions.CRASHED, message="OperationalError: password authentication failed: s3cret")
    # When its owner reads the events, Then only the exception class is shown
    [event] = api.get(f"/api/tasks/{task.pk}/events/?status=error").json()["results"]
    assert [entry["message"] for entry in event["messages"] if entry["status"] == "error"] == ["OperationalError"]
    # And a staff owner sees the whole text (staff also have the admin and the logs)
    ops = django_user_model.objects.create_user("ops", is_staff=True)
    staff_task = make_task(ops)
    job = job_ids(staff_task)[0]
    launching.record(job, transitions.START)
    launching.record(job, transitions.CRASHED, message="OperationalError: password authentication failed: s3cret")
    staff = APIClient()
    staff.force_authenticate(ops)
    assert "s3cret" in staff.get(f"/api/events/{job}/").json()["messages"][-1]["message"]


def progress_entry(done: int, total: int, unit: str = "batch") -> dict:
    entry = transitions.message_entry(transitions.WORKING, f"{unit} {done} of {total}")
    entry["done"], entry["total"] = done, total
    return entry


def test_running_jobs_and_their_reported_fractions_come_with_running_1(api, ann):
    # Given a one-job task whose job reports 3 of 4 batches
    task = make_task(ann, size=1)
    [jid] = job_ids(task)
    launching.record(jid, transitions.START)
    launching.record(jid, transitions.MESSAGES_ONLY, entries=[progress_entry(1, 4), progress_entry(3, 4)])
    # When the progress page polls with ?running=1
    body = api.get(f"/api/tasks/{task.pk}/?running=1").json()
    # Then the running job's latest message and fraction count toward the task, in progress too
    assert body["running"] == [{"job_id": jid, "message": "batch 3 of 4", "fraction": 0.75}]
    assert body["running_progress"] == 0.75 and body["progress"] == 0.75
    # And the plain summary keeps the contract's shape and its single query
    plain = api.get(f"/api/tasks/{task.pk}/")
    assert "running" not in plain.json()
    assert plain["ETag"] != api.get(f"/api/tasks/{task.pk}/?running=1")["ETag"]
    # And a progress message changes the ETag, so a poll sees it
    etag = api.get(f"/api/tasks/{task.pk}/?running=1")["ETag"]
    launching.record(jid, transitions.MESSAGES_ONLY, entries=[progress_entry(4, 4)])
    again = api.get(f"/api/tasks/{task.pk}/?running=1", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 200 and again.json()["running"][0]["fraction"] == 1.0
    # And the events API shows messages in the contract's three fields only
    [event] = api.get(f"/api/tasks/{task.pk}/events/").json()["results"]
    assert all(set(entry) == {"at", "status", "message"} for entry in event["messages"])


def test_report_progress_records_the_fraction(ann):
    from tests.tracking.jobs import Succeeds as Job
    from tracking.progress import EventHandle

    task = make_task(ann, size=1)
    [jid] = job_ids(task)
    job = Job()
    job.task_event = EventHandle(jid, flush_interval_seconds=3600)
    job.task_event.start()
    job.report_progress(3, 4, unit="batch")
    job.task_event.end(transitions.FINISHED)
    stored = Event.objects.get(job_id=jid).messages
    reported = [entry for entry in stored if "done" in entry]
    assert [(entry["message"], entry["done"], entry["total"]) for entry in reported] == [("batch 3 of 4", 3, 4)]


def test_progress_counts_running_fractions_and_never_goes_down(api, ann):
    # Given a four-job task
    task = make_task(ann, size=4)
    first, second, third, _ = job_ids(task)

    def progress() -> float:
        return api.get(f"/api/tasks/{task.pk}/").json()["progress"]

    seen = [progress()]
    # When one job finishes and two others run and report their fractions
    launching.record(first, transitions.START)
    launching.record(first, transitions.FINISHED)
    seen.append(progress())
    launching.record(second, transitions.START)
    launching.record(second, transitions.MESSAGES_ONLY, entries=[progress_entry(1, 2)])
    seen.append(progress())
    launching.record(third, transitions.START)
    launching.record(third, transitions.MESSAGES_ONLY, entries=[progress_entry(9, 10)])
    seen.append(progress())
    # and the third crashes and is retried while the second still runs, reporting less on its new run
    launching.record(third, transitions.CRASHED, message="OperationalError")
    launching.record(third, transitions.RETRY_SCHEDULED, message="retry 1 in 15 s")
    seen.append(progress())
    launching.record(third, transitions.START)
    launching.record(third, transitions.MESSAGES_ONLY, entries=[progress_entry(1, 10)])
    seen.append(progress())
    # and the second finishes while the third waits for its next retry (no job of the task working)
    launching.record(third, transitions.CRASHED, message="OperationalError")
    launching.record(third, transitions.RETRY_SCHEDULED, message="retry 2 in 16 s")
    launching.record(second, transitions.FINISHED)
    seen.append(progress())
    # Then progress moved with the reported fractions (not only when jobs ended), stayed in
    # 0..1 and never went down: a retried job keeps the most it showed until it settles
    assert seen == [0.0, 0.25, 0.375, 0.6, 0.6, 0.6, 0.725], seen


def test_event_pages_follow_next_links_by_keyset_and_numbered_pages_still_answer(api, ann, settings):
    # Given a task of seven events, three of them failed, two a page
    settings.TRACKING = {"API_PAGE_SIZE": 2}
    task = make_task(ann, size=7)
    ids = job_ids(task)
    for job_id in ids[::3]:
        launching.record(job_id, transitions.FAILED_ON_PURPOSE, message="no stock")
    # When a client follows the next links
    seen, url, counts = [], f"/api/tasks/{task.pk}/events/", []
    while url:
        page = api.get(url).json()
        seen += [row["job_id"] for row in page["results"]]
        counts.append(page["count"])
        url = page["next"]
    # Then it gets every event once, in order, and the count on every page
    assert seen == ids and set(counts) == {7} and len(counts) == 4
    assert "cursor=" in api.get(f"/api/tasks/{task.pk}/events/").json()["next"]
    # And a filtered list counts and pages its own events
    failed = api.get(f"/api/tasks/{task.pk}/events/?status=failed").json()
    assert failed["count"] == 3 and [row["job_id"] for row in failed["results"]] == ids[0:4:3]
    assert [row["job_id"] for row in api.get(failed["next"]).json()["results"]] == [ids[6]]
    # And ?page=N, the numbered pages, still answers
    numbered = api.get(f"/api/tasks/{task.pk}/events/?page=2").json()
    assert numbered["count"] == 7 and [row["job_id"] for row in numbered["results"]] == ids[2:4]


@pytest.mark.django_db(transaction=True)
def test_a_task_launched_in_the_background_shows_as_launching_until_its_events_are_written(api, ann, settings, redis):
    from tests.tracking.conftest import pop_item, run_item

    # Given a task bigger than LAUNCH_INLINE_JOBS
    settings.TRACKING = {"LAUNCH_INLINE_JOBS": 2, "LAUNCH_CHUNK_JOBS": 2}
    task = make_task(ann, size=3)
    # Then its summary says launching, every job waiting, and its event list is empty so far
    summary = api.get(f"/api/tasks/{task.pk}/").json()
    assert (summary["status"], summary["total"], summary["counts"]["enqueue"]) == ("launching", 3, 3)
    assert api.get(f"/api/tasks/{task.pk}/events/").json() == {"count": 0, "next": None, "previous": None, "results": []}
    # When its first chunk ran, the list counts the events written
    run_item(pop_item(redis))
    assert api.get(f"/api/tasks/{task.pk}/events/").json()["count"] == 2
    assert api.get(f"/api/tasks/{task.pk}/").json()["status"] == "launching"
    # And once the last chunk ran, the task is pending
    run_item(pop_item(redis))
    assert api.get(f"/api/tasks/{task.pk}/").json()["status"] == "pending"


# --- POST /api/tasks/<id>/cancel/ ---------------------------------------------------------------


@pytest.fixture
def pushed(django_capture_on_commit_callbacks):
    """``make_task`` with its jobs pushed (the test's transaction never commits)."""

    def launch(owner, **kwargs) -> Task:
        with django_capture_on_commit_callbacks(execute=True):
            return make_task(owner, **kwargs)

    return launch


def test_cancel_answers_the_summary_cancelled_and_is_idempotent(api, ann, redis, pushed):
    # Given a task of three waiting jobs
    task = pushed(ann, size=3)
    assert redis.llen("queue:default") == 3
    # When its owner cancels it
    response = api.post(f"/api/tasks/{task.pk}/cancel/")
    # Then the answer is its summary: cancelled, every job settled cancelled, none left in Redis
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "cancelled" and body["cancelled_at"] is not None and body["finished_at"] is not None
    assert body["counts"] == {"enqueue": 0, "working": 0, "finish": 0, "failed": 0, "error": 0, "cancelled": 3}
    assert body["progress"] == 1.0
    assert redis.llen("queue:default") == 0
    # And a second cancel answers the same, changing nothing
    again = api.post(f"/api/tasks/{task.pk}/cancel/")
    assert again.status_code == 200 and again.json()["counts"] == body["counts"]
    assert again.json()["cancelled_at"] == body["cancelled_at"]
    # And GET says the same
    assert api.get(f"/api/tasks/{task.pk}/").json()["status"] == "cancelled"


def test_cancel_is_the_owners_only(ann, bob, redis, pushed):
    task = pushed(ann, size=2)
    other = APIClient()
    other.force_authenticate(bob)
    assert other.post(f"/api/tasks/{task.pk}/cancel/").status_code == 404
    assert APIClient().post(f"/api/tasks/{task.pk}/cancel/").status_code in (401, 403)
    assert other.post("/api/tasks/" + "x" * 300 + "/cancel/").status_code == 404
    assert redis.llen("queue:default") == 2, "nothing was cancelled"
    task.refresh_from_db()
    assert task.cancelled_at is None


def test_cancel_needs_the_csrf_token_with_a_session_but_not_with_a_token(ann, redis):
    task = make_task(ann, size=1)
    by_session = APIClient(enforce_csrf_checks=True)
    assert by_session.login(username="ann", password="pw-ann-123")
    assert by_session.post(f"/api/tasks/{task.pk}/cancel/").status_code == 403
    page = by_session.get(f"/tasks/{task.pk}/")
    token = page.cookies["csrftoken"].value
    assert by_session.post(f"/api/tasks/{task.pk}/cancel/", HTTP_X_CSRFTOKEN=token).status_code == 200
    second = make_task(ann, size=1)
    by_token = APIClient(enforce_csrf_checks=True)
    by_token.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=ann).key}")
    assert by_token.post(f"/api/tasks/{second.pk}/cancel/").json()["status"] == "cancelled"


def test_the_progress_page_has_a_cancel_button_posting_to_the_api(client, ann):
    task = make_task(ann, size=1)
    client.force_login(ann)
    page = client.get(f"/tasks/{task.pk}/").content.decode()
    assert f'data-cancel-url="/api/tasks/{task.pk}/cancel/"' in page
    assert 'id="cancel-task"' in page and "csrfmiddlewaretoken" in page
