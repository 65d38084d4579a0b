"""Redis down: every HTTP endpoint of the demo answers 503 with a reason, never 500.

Given the project's own settings (the API throttle counters and the jobs both live in Redis) and a
Redis server that is then killed, When a signed-in user polls the tracking API, opens the progress
page, the dashboard or the admin, Then each answers 503 (JSON for the API) and no view crashes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client

from tests.redis_server import RedisServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_down(settings) -> Iterator[RedisServer]:
    from jobsapp import connection

    server = RedisServer().start()
    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": server.url, "REDIS_SOCKET_TIMEOUT_SECONDS": 1.0}
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": server.url,
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient", "SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
        }
    }
    connection.reset()
    server.kill()
    yield server
    connection.reset()
    server.stop()


@pytest.fixture
def staff_client(django_user_model) -> Client:
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def test_tracking_api_answers_503_when_redis_is_down(redis_down, staff_client, django_user_model):
    from tracking.models import Task

    task = Task.objects.create(name="t", owner=django_user_model.objects.get(username="ops"), total=0)
    for url in ("/api/tasks/", f"/api/tasks/{task.pk}/", f"/api/tasks/{task.pk}/events/"):
        response = staff_client.get(url, HTTP_ACCEPT="application/json")
        assert response.status_code == 503, (url, response.status_code, response.content[:300])
        assert response.json()["error"] == "redis_unavailable"


@pytest.mark.parametrize("url", ["/jobs/", "/jobs/queues/", "/jobs/sets/retries/", "/jobs/metrics", "/admin/tracking/task/"])
def test_pages_answer_503_or_work_without_redis(redis_down, staff_client, url):
    response = staff_client.get(url)
    assert response.status_code in (200, 503), (url, response.status_code, response.content[:300])
    assert response.status_code != 500


def test_enqueueing_from_a_view_answers_503(redis_down, staff_client, settings):
    from tests.security import enqueue_view

    settings.ROOT_URLCONF = enqueue_view
    response = staff_client.post("/enqueue/")
    assert response.status_code == 503
    assert b"Redis is unavailable" in response.content


def test_a_503_names_the_redis_address_to_staff_only(redis_down, staff_client, settings):
    # Given Redis down behind a password that holds an "@", and a view that enqueues
    from jobsapp import connection
    from tests.security import enqueue_view

    settings.JOBSAPP = {**settings.JOBSAPP, "REDIS_URL": f"redis://:p@ss-w0rd@127.0.0.1:{redis_down.port}/0"}
    connection.reset()
    settings.ROOT_URLCONF = enqueue_view
    # When an anonymous client and a JSON client call it, Then both read only "Redis is unavailable"
    for response in (Client().post("/enqueue/"), Client().post("/enqueue/", HTTP_ACCEPT="application/json")):
        assert response.status_code == 503 and response["Retry-After"]
        assert b"Redis is unavailable" in response.content
        assert str(redis_down.port).encode() not in response.content and b"127.0.0.1" not in response.content
    # And staff read the address, without the password
    staff = staff_client.post("/enqueue/")
    assert f"127.0.0.1:{redis_down.port}".encode() in staff.content
    assert b"p@ss" not in staff.content and b"ss-w0rd" not in staff.content
