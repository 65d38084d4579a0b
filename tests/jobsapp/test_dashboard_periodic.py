"""The dashboard's Periodic page and its actions (staff only, POST + CSRF), and the metrics."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.test import Client
from django.urls import reverse

from jobsapp import api, periodic
from jobsapp.connection import get_redis


def server_now() -> float:
    return periodic.server_time(get_redis())


@pytest.mark.django_db
def test_dashboard_page_and_actions_behind_staff_and_csrf(django_user_model, redis):
    # Given a registered periodic job, a staff user with CSRF checks on, and a member
    periodic.register(
        get_redis(),
        periodic.build("report", {"class": "tests.testapp.jobs.Record", "cron": "*/5 * * * *", "args": ["<b>x</b>"]}),
        server_now=server_now(),
    )
    staff = Client(enforce_csrf_checks=True)
    staff.force_login(django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True))
    member = Client()
    member.force_login(django_user_model.objects.create_user("member", password="pw-member-123"))
    action = reverse("jobsapp:periodic_action")
    # When the page is read, then it lists the job with its schedule and actions
    page = staff.get(reverse("jobsapp:periodic"))
    body = page.content.decode()
    assert page.status_code == 200 and "*/5 * * * *" in body and ">Disable<" in body and ">Run now<" in body
    # and mutations need staff, POST and the CSRF token
    assert member.get(reverse("jobsapp:periodic")).status_code == 403
    assert member.post(action, {"name": "report", "action": "disable"}).status_code == 403
    assert staff.post(action, {"name": "report", "action": "disable"}).status_code == 403
    assert staff.get(action).status_code == 405
    assert api.PeriodicSet.get("report").enabled
    token = page.cookies["csrftoken"].value
    assert staff.post(action, {"name": "report", "action": "disable", "csrfmiddlewaretoken": token}).status_code == 302
    assert staff.post(action, {"name": "report", "action": "run", "csrfmiddlewaretoken": token}).status_code == 302
    assert staff.post(action, {"name": "report", "action": "explode", "csrfmiddlewaretoken": token}).status_code == 400
    assert not api.PeriodicSet.get("report").enabled
    assert json.loads(redis.rpop("queue:default"))["args"] == ["<b>x</b>"]
    # and the metrics show it
    metrics = staff.get(reverse("jobsapp:metrics")).content.decode()
    assert 'jobs_periodic_enabled{name="report"} 0.0' in metrics


@pytest.mark.django_db
def test_the_page_and_the_metrics_show_a_malformed_entry_instead_of_failing(admin_client, redis):
    # Given a job of ours whose hash another client broke (inf, nan, 400 digits) and a
    # cron_jobs member holding a string
    periodic.register(get_redis(), periodic.build("report", {"class": "tests.testapp.jobs.Record", "every": 5}), server_now=server_now())
    redis.hset(
        "cron_job:report",
        mapping={
            "jobsapp_last_tick": "1e999",
            "jobsapp_enqueued_count": "nan",
            "jobsapp_last_enqueued_at": "inf",
            "jobsapp_every": "9" * 400,
        },
    )
    redis.sadd("cron_jobs", "cron_job:<i>text</i>")
    redis.set("cron_job:<i>text</i>", "not a hash")
    # When the page and the metrics are read
    page = admin_client.get(reverse("jobsapp:periodic"))
    metrics = admin_client.get(reverse("jobsapp:metrics"))
    # Then both answer, the page marks both entries malformed, and the name is escaped
    body = page.content.decode()
    assert page.status_code == 200 and metrics.status_code == 200
    assert body.count("data-malformed") == 2 and "jobsapp_every" in body
    assert "&lt;i&gt;text&lt;/i&gt;" in body and "<i>text</i>" not in body


@pytest.mark.django_db
def test_the_page_shows_each_entry_s_last_outcome_and_next_tick(admin_client, redis):
    # Given a job every 10 minutes whose last tick's job failed
    definition = periodic.build("report", {"class": "tests.testapp.jobs.Record", "every": 600})
    now = server_now()
    periodic.register(get_redis(), definition, server_now=now)
    periodic.record_outcome(get_redis(), {"periodic": "report", "jid": "a" * 24}, error=ValueError("no"), finished_at=now - 30)
    # When the page is read
    body = admin_client.get(reverse("jobsapp:periodic")).content.decode()
    row = body[body.index('data-periodic="report"') :]
    row = row[: row.index("</tr>")]
    # Then its row shows the outcome and when, and the next tick as a UTC time
    next_tick = definition.next_tick(now)
    iso = dt.datetime.fromtimestamp(next_tick, dt.UTC).isoformat(timespec="seconds")
    assert "failed: ValueError" in row and "ago" in row
    assert f'datetime="{iso.replace("+00:00", "Z")}"' in row


@pytest.mark.django_db
def test_run_now_of_a_broken_stored_message_warns_instead_of_failing(admin_client, redis):
    # Given a sidekiq-cron entry whose stored message has args that are not a list
    redis.sadd("cron_jobs", "cron_job:odd")
    redis.hset(
        "cron_job:odd", mapping={"name": "odd", "klass": "HardWorker", "cron": "* * * * *", "message": '{"class":"HardWorker","args":"x"}'}
    )
    # When staff press "Run now", Then the page comes back with the reason and nothing was pushed
    response = admin_client.post(reverse("jobsapp:periodic_action"), {"name": "odd", "action": "run"}, follow=True)
    assert response.status_code == 200 and "cannot be pushed" in response.content.decode()
    assert redis.llen("queue:default") == 0
