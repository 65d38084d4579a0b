"""The admin and the tracking pages: who may see them, and hostile strings rendered escaped.

The jobs dashboard has the same checks in tests/jobsapp/test_dashboard.py (anonymous -> login,
non-staff -> 403, POST + CSRF, escaping on every page); this covers what the tracking app adds to
the admin and its progress page.
"""

from __future__ import annotations

import pytest
from django.test import Client

from tests.tracking.jobs import Succeeds
from tracking import launching, transitions
from tracking.models import Event, Task

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def hostile_task(django_user_model, redis, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    owner = django_user_model.objects.create_user("ann", password="pw")
    task = Task.objects.launch(Succeeds, [[HOSTILE]], owner=owner, name=HOSTILE)
    event = Event.objects.get(task=task)
    launching.record(event.job_id, transitions.START)
    launching.record(event.job_id, transitions.DEAD, message=HOSTILE)  # shown in the admin inline
    return task


def admin_urls(task: Task) -> list[str]:
    event = Event.objects.get(task=task)
    return [
        "/admin/",
        "/admin/tracking/task/",
        f"/admin/tracking/task/{task.pk}/change/",
        "/admin/tracking/event/",
        f"/admin/tracking/event/{event.pk}/change/",
    ]


def test_admin_sends_anonymous_and_non_staff_to_its_login(hostile_task, django_user_model):
    member = Client()
    member.force_login(django_user_model.objects.create_user("member", password="pw"))
    for url in admin_urls(hostile_task):
        for client in (Client(), member):
            response = client.get(url)
            assert response.status_code == 302 and "/admin/login/" in response["Location"], (url, response.status_code)


def test_admin_actions_need_post_with_csrf(hostile_task, django_user_model):
    staff = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(staff)
    response = browser.post("/admin/tracking/task/", {"action": "delete_selected", "_selected_action": [hostile_task.pk]})
    assert response.status_code == 403
    assert Task.objects.filter(pk=hostile_task.pk).exists()


def test_hostile_strings_render_escaped_in_the_admin_and_progress_page(hostile_task, django_user_model):
    staff = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    browser = Client()
    browser.force_login(staff)
    pages = [browser.get(url) for url in admin_urls(hostile_task)]
    owner = Client()
    owner.force_login(hostile_task.owner)
    pages.append(owner.get(f"/tasks/{hostile_task.pk}/"))
    for response in pages:
        assert response.status_code == 200, response.status_code
        body = response.content.decode()
        assert "<script>alert(" not in body and "<img src=x" not in body
    assert any("&lt;script&gt;" in response.content.decode() for response in pages)
