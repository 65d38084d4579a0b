"""tracking's system checks (issue 8): each piece of the install guide, missing, is an error with a
stable id and a hint; ``Task.objects.launch`` refuses to run without the middlewares."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import clear_url_caches

from tests.tracking.jobs import Succeeds
from tracking import checks
from tracking.models import Event, Task


def test_the_projects_settings_pass():
    assert checks.check_middlewares() == [] and checks.check_settings() == [] and checks.check_api() == []


@pytest.mark.django_db
def test_tracking_without_its_middlewares_is_an_error_and_launch_refuses(settings):
    # Given tracking installed but the engine middlewares not configured
    settings.JOBSAPP = {**settings.JOBSAPP, "CLIENT_MIDDLEWARE": [], "SERVER_MIDDLEWARE": ["tracking.middleware.TrackingServerMiddleware"]}
    # Then the check names the missing one
    [message] = checks.check_middlewares()
    assert message.id == "tracking.E001" and "TrackingClientMiddleware" in message.msg and "TrackingServer" not in message.msg
    assert "README" in message.hint
    # And launch refuses before writing anything (it used to mark every job "not enqueued")
    with pytest.raises(ImproperlyConfigured, match=r"tracking\.E001.*TrackingClientMiddleware"):
        Task.objects.launch(Succeeds, [[1], [2]])
    assert not Task.objects.exists() and not Event.objects.exists()


@pytest.mark.parametrize(
    ("tracking", "expected_id", "in_text"),
    [
        ({"API_PAGE_SIZ": 10}, "tracking.E004", "API_PAGE_SIZE"),
        ({"API_PAGE_SIZE": "50"}, "tracking.E005", "50"),
        ({"COUNTER_SHARDS": 0}, "tracking.E006", ">= 1"),
        ({"BATCH_WAIT_SECONDS": -1}, "tracking.E006", ">= 0"),
        ({"BATCH_WRITES": "no"}, "tracking.E005", "True or False"),
    ],
)
def test_a_wrong_tracking_setting_is_an_error(settings, tracking, expected_id, in_text):
    settings.TRACKING = tracking
    found = {message.id: f"{message.msg} {message.hint}" for message in checks.check_settings()}
    assert expected_id in found and in_text in found[expected_id], found


def test_the_api_without_rest_framework_installed_is_an_error(settings):
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app not in ("rest_framework", "rest_framework.authtoken")]
    [message] = checks.check_api()
    assert message.id == "tracking.E002" and "rest_framework" in message.hint


def test_the_schema_without_drf_spectacular_s_schema_class_is_an_error(settings):
    settings.REST_FRAMEWORK = {key: value for key, value in settings.REST_FRAMEWORK.items() if key != "DEFAULT_SCHEMA_CLASS"}
    [message] = checks.check_api()
    assert message.id == "tracking.E003" and "drf_spectacular.openapi.AutoSchema" in message.hint


def test_no_api_check_when_tracking_urls_are_not_included(settings):
    settings.ROOT_URLCONF = "tests.security.enqueue_view"
    clear_url_caches()
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "rest_framework"]
    settings.REST_FRAMEWORK = {}
    assert checks.check_api() == []
