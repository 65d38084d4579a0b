"""Who reads which task: the API's own permission, whatever the project's DRF defaults are.

Issue 8's security bug: with DRF's default ``AllowAny``, an anonymous caller read every task
launched with ``owner=None`` (``AnonymousUser.pk`` is None, so the owner filter matched them).
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.tracking.jobs import Succeeds
from tracking.models import Event, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def drf_allows_anyone(settings):
    """A project that left DRF's default permission as it comes: AllowAny."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"]}


@pytest.fixture
def ownerless() -> Task:
    return Task.objects.launch(Succeeds, [[1], [2]], owner=None, name="nightly import")


def client_for(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def urls_of(task: Task) -> list[str]:
    jid = Event.objects.filter(task=task).values_list("job_id", flat=True).first()
    return ["/api/tasks/", f"/api/tasks/{task.pk}/", f"/api/tasks/{task.pk}/events/", f"/api/events/{jid}/"]


def test_anonymous_callers_are_refused_even_when_drf_allows_anyone(drf_allows_anyone, ownerless):
    # Given a task with no owner and a project whose DRF default permission is AllowAny
    # When an anonymous caller asks for it, its list, its events and one event
    for url in urls_of(ownerless):
        response = client_for().get(url)
        # Then every answer is a refusal, and nothing of the task is in it
        assert response.status_code in (401, 403), (url, response.status_code)
        assert b"nightly import" not in response.content and ownerless.pk.encode() not in response.content


def test_an_ownerless_task_is_visible_to_staff_only(drf_allows_anyone, ownerless, django_user_model):
    # Given a plain user and a staff user
    carol = django_user_model.objects.create_user("carol")
    ops = django_user_model.objects.create_user("ops", is_staff=True)
    # When the plain user asks, Then the ownerless task does not exist for them
    plain = client_for(carol)
    assert plain.get("/api/tasks/").json()["count"] == 0
    for url in urls_of(ownerless)[1:]:
        assert plain.get(url).status_code == 404, url
    # And staff see it in the list, its summary, its events and each event
    staff = client_for(ops)
    assert [row["id"] for row in staff.get("/api/tasks/").json()["results"]] == [ownerless.pk]
    for url in urls_of(ownerless)[1:]:
        assert staff.get(url).status_code == 200, url


def test_the_progress_page_of_an_ownerless_task_is_staff_only(client, ownerless, django_user_model):
    client.force_login(django_user_model.objects.create_user("carol"))
    assert client.get(f"/tasks/{ownerless.pk}/").status_code == 404
    client.force_login(django_user_model.objects.create_user("ops", is_staff=True))
    assert client.get(f"/tasks/{ownerless.pk}/").status_code == 200


def test_an_inactive_user_with_a_session_is_refused(drf_allows_anyone, django_user_model):
    gone = django_user_model.objects.create_user("gone", is_active=False)
    Task.objects.launch(Succeeds, [[1]], owner=gone)
    assert client_for(gone).get("/api/tasks/").status_code in (401, 403)
