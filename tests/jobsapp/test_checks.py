"""System checks: each misconfiguration a new user hit (issue 8) is an error with a stable id and
a hint, from ``manage.py check`` and before ``runworkers`` starts."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from jobsapp.checks import check_settings
from jobsapp.conf import DEFAULTS


def ids_for(settings, **jobsapp) -> dict[str, str]:
    settings.JOBSAPP = {**settings.JOBSAPP, **jobsapp}
    return {message.id: message.msg + " | " + (message.hint or "") for message in check_settings()}


def test_the_projects_settings_pass(settings):
    assert check_settings() == []


@pytest.mark.parametrize(
    ("key", "value", "expected_id", "in_text"),
    [
        ("QUEUES", "default", "jobsapp.E005", "use a list, ['default']"),
        ("PROCESSES", "2", "jobsapp.E005", "Use the number itself, 2"),
        ("MAX_RETRIES", -1, "jobsapp.E006", ">= 0"),
        ("DEAD_MAX_JOBS", "x", "jobsapp.E005", "'x'"),
        ("PROCESSES", 0, "jobsapp.E006", ">= 1"),
        ("CONCURRENCY", "10", "jobsapp.E004", "positive number of processor threads"),
        ("SHUTDOWN_TIMEOUT_SECONDS", -5, "jobsapp.E006", ">= 0"),
        ("REDACT_KEYS", "password", "jobsapp.E005", "use a list"),
        ("CLIENT_MIDDLEWARE", "tracking.middleware.TrackingClientMiddleware", "jobsapp.E005", "use a list"),
        ("MAX_RETRIES", True, "jobsapp.E005", "whole number"),
        ("QUEUES", [], "jobsapp.E007", "no queue"),
        ("QUEUES", ["critical,x", "default"], "jobsapp.E007", "not a whole number"),
        ("FETCH", "fast", "jobsapp.E002", "reliable"),
        ("MAX_PAYLOAD_BYTES", 0, "jobsapp.E003", "positive number of bytes"),
        ("NOT_A_SETTING", 1, "jobsapp.E001", "Known keys:"),
        ("LOG_FORMAT", "xml", "jobsapp.E008", '"json"'),
        ("ENQUEUE_ON_COMMIT", "yes", "jobsapp.E005", "True or False"),
    ],
)
def test_a_wrong_setting_is_an_error_with_an_id_and_a_hint(settings, key, value, expected_id, in_text):
    # Given one wrong JOBSAPP value, When the checks run, Then that id says what and how
    found = ids_for(settings, **{key: value})
    assert expected_id in found, found
    assert in_text in found[expected_id]


def test_a_duration_may_be_a_fraction_and_weights_are_fine(settings):
    assert ids_for(settings, PROCESS_TTL_SECONDS=2.5, HEARTBEAT_INTERVAL_SECONDS=0.3, QUEUES=["critical,3", "default"]) == {}


def test_the_unknown_key_check_reads_the_known_keys_from_the_defaults(settings, monkeypatch):
    # Given a setting another part of jobsapp declares in conf.DEFAULTS
    monkeypatch.setitem(DEFAULTS, "SOME_NEW_FEATURE", 5)
    # Then it is known, and typed by its default
    assert ids_for(settings, SOME_NEW_FEATURE=3) == {}
    assert "jobsapp.E005" in ids_for(settings, SOME_NEW_FEATURE="3")


def test_jobsapp_that_is_not_a_dict_is_an_error(settings):
    settings.JOBSAPP = ["REDIS_URL"]
    [message] = check_settings()
    assert message.id == "jobsapp.E005" and isinstance(message, checks.Error)


def test_manage_py_check_and_runworkers_refuse_a_string_for_queues(settings):
    settings.JOBSAPP = {**settings.JOBSAPP, "QUEUES": "default"}
    with pytest.raises(SystemCheckError, match=r"jobsapp\.E005"):
        call_command("check", tags=["jobsapp"])
    with pytest.raises(SystemCheckError, match=r"jobsapp\.E005"):
        call_command("runworkers")


def test_a_dashboard_without_any_login_page_is_a_warning(settings):
    from django.conf import global_settings

    from jobsapp.checks import check_login_page

    # Given the project's URLs (admin included) there is a login page
    assert check_login_page() == []
    # When the dashboard is included without the admin and LOGIN_URL is Django's default
    settings.ROOT_URLCONF = "tests.jobsapp.urls_without_admin"
    settings.LOGIN_URL = global_settings.LOGIN_URL
    [warning] = check_login_page()
    assert warning.id == "jobsapp.W001" and "LOGIN_URL" in warning.hint
    # And a LOGIN_URL of the project's own silences it
    settings.LOGIN_URL = "/sign-in/"
    assert check_login_page() == []


@pytest.mark.parametrize(("key", "value", "maximum"), [("CONCURRENCY", 5000, "1,000"), ("ASYNC_CONCURRENCY", 100_000, "10,000")])
def test_a_concurrency_above_what_runworkers_runs_names_the_setting(settings, key, value, maximum):
    # Given a concurrency setting runworkers would refuse (it used to pass the checks, then
    # runworkers refused "--async-concurrency", a flag the user never typed)
    found = ids_for(settings, **{key: value})
    # Then the checks name the setting and its maximum, and runworkers stops on them
    assert f"JOBSAPP[{key!r}] is {value!r}" in found["jobsapp.E006"] and maximum in found["jobsapp.E006"]
    with pytest.raises(SystemCheckError, match=rf"JOBSAPP\['{key}'\]"):
        call_command("runworkers")


def test_a_default_queue_the_default_workers_do_not_serve_is_a_warning(settings):
    from jobsapp.checks import check_default_queue

    # Given DEFAULT_QUEUE moved but QUEUES left at its default
    settings.JOBSAPP = {**settings.JOBSAPP, "DEFAULT_QUEUE": "low", "QUEUES": ["default"]}
    # Then jobsapp.W002 says that jobs without a queue would never be taken, and how to fix it
    [warning] = check_default_queue()
    assert warning.id == "jobsapp.W002" and isinstance(warning, checks.Warning)
    assert "'low'" in warning.msg and "-q low" in warning.hint
    # And listing it (with a weight or not) silences it
    settings.JOBSAPP = {**settings.JOBSAPP, "QUEUES": ["critical,3", "low,1"]}
    assert check_default_queue() == []
