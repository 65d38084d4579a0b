"""Fuzzing the tracking API from its own OpenAPI schema: hostile ids, page sizes and filters
never give a 500, never leak another user's data, and ids are not guessable.

A hypothesis-driven client (schemathesis is not a dependency): for every path and parameter the
schema at ``/api/schema/`` declares, it draws hostile values (path traversal, NUL bytes, SQL,
huge numbers, unicode, very long strings) and asserts each answer is a deliberate 2xx/3xx/4xx.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from tests.tracking.jobs import Succeeds
from tracking.models import Event, Task

pytestmark = pytest.mark.django_db

HOSTILE_TEXT = st.one_of(
    st.sampled_from(["../..", "..%2f..", "%00", "\x00", "' OR 1=1 --", "1;DROP TABLE tracking_task", "-1", "0", "1e999",
                     "99999999999999999999999", "NaN", "null", "<script>alert(1)</script>", "a" * 5000, "%", "?", "#", " ",
                     "failed,error", "FAILED", "finish,,", ",", "\u202e", "☃", "0x10"]),
    st.text(min_size=0, max_size=60),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)  # fmt: skip

ALLOWED_STATUSES = {200, 301, 302, 304, 400, 401, 403, 404, 405, 406, 429}


@pytest.fixture
def world(django_user_model, settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.TRACKING = {**getattr(settings, "TRACKING", {}), "API_THROTTLE_RATE": "1000000/min"}
    ann = django_user_model.objects.create_user("ann", password="pw-ann-123")
    bob = django_user_model.objects.create_user("bob", password="pw-bob-123")
    ann_task = Task.objects.launch(Succeeds, [[index] for index in range(3)], owner=ann)
    bob_task = Task.objects.launch(Succeeds, [["bob's secret"]], owner=bob)
    client = APIClient(raise_request_exception=False)
    client.force_authenticate(ann)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    return {"client": client, "schema": schema, "ann_task": ann_task, "bob_task": bob_task}


def operations(schema: dict) -> list[tuple[str, list[dict]]]:
    found = []
    for path, methods in schema["paths"].items():
        if "get" in methods and path.startswith("/api/") and "schema" not in path:
            found.append((path, methods["get"].get("parameters", [])))
    return found


def test_the_schema_lists_the_endpoints(world):
    paths = [path for path, _ in operations(world["schema"])]
    assert any("{" in path for path in paths) and len(paths) >= 4, paths


@hypothesis_settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_parameters_never_500_and_never_leak(world, data):
    path, parameters = data.draw(st.sampled_from(operations(world["schema"])))
    url = path
    for name in re.findall(r"{(\w+)}", path):
        value = data.draw(st.one_of(HOSTILE_TEXT, st.sampled_from([world["ann_task"].pk, world["bob_task"].pk])), label=name)
        url = url.replace("{" + name + "}", quote(value, safe=""))
    query = {}
    for parameter in parameters:
        if parameter.get("in") == "query" and data.draw(st.booleans(), label=f"send {parameter['name']}"):
            query[parameter["name"]] = data.draw(HOSTILE_TEXT, label=parameter["name"])
    response = world["client"].get(url, query, HTTP_ACCEPT="application/json")
    assert response.status_code in ALLOWED_STATUSES, (url, query, response.status_code, response.content[:300])
    assert b"bob's secret" not in response.content
    if world["bob_task"].pk in url:  # another user's task: exactly like a missing one
        assert response.status_code in (400, 404), (url, query, response.status_code)


def test_task_ids_are_not_guessable(world):
    ids = [world["ann_task"].pk, world["bob_task"].pk]
    assert all(re.fullmatch(r"[0-9a-f]{32}", task_id) for task_id in ids)  # 128 random bits
    job_ids = list(Event.objects.values_list("job_id", flat=True))
    assert all(len(job_id) >= 24 for job_id in job_ids) and len(set(job_ids)) == len(job_ids)
