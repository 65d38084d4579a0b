"""System checks for the tracking app: what the install guide lists, when it is missing or wrong.

| id | what |
|---|---|
| tracking.E001 | the tracking middlewares are not in JOBSAPP's CLIENT_MIDDLEWARE / SERVER_MIDDLEWARE |
| tracking.E002 | tracking's URLs are included but ``rest_framework`` is not installed |
| tracking.E003 | tracking's schema view is included but DRF's schema class is not drf-spectacular's |
| tracking.E004 | unknown TRACKING key (read from ``tracking.conf.DEFAULTS``) |
| tracking.E005 | a TRACKING value of the wrong type |
| tracking.E006 | a TRACKING number out of range |

E002 and E003 look at the URLconf, so they are tagged ``urls`` (``runworkers`` skips them).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.urls import NoReverseMatch, reverse

from jobsapp import jobs_settings, settings_problems

from .conf import DEFAULTS

CLIENT = "tracking.middleware.TrackingClientMiddleware"
SERVER = "tracking.middleware.TrackingServerMiddleware"


def missing_middlewares() -> list[str]:
    """The ``JOBSAPP`` entries tracking needs and does not find, as ``KEY: path`` lines."""
    missing = []
    for key, path in (("CLIENT_MIDDLEWARE", CLIENT), ("SERVER_MIDDLEWARE", SERVER)):
        configured = getattr(jobs_settings, key)
        if not isinstance(configured, (list, tuple)) or path not in configured:
            missing.append(f'JOBSAPP["{key}"]: "{path}"')
    return missing


@checks.register("tracking")
def check_middlewares(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    missing = missing_middlewares()
    if not missing:
        return []
    return [
        checks.Error(
            "tracking is installed but its engine middlewares are not: " + "; ".join(missing) + ".",
            hint="Without them a launched task's jobs are not recorded (Task.objects.launch refuses to run). Add them "
            "as in the README's 'Add jobsapp to your project'.",
            id="tracking.E001",
        )
    ]


@checks.register("tracking")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return settings_problems(
        "TRACKING",
        getattr(settings, "TRACKING", None),
        DEFAULTS,
        ids={"unknown": "tracking.E004", "type": "tracking.E005", "range": "tracking.E006"},
        at_least_one=frozenset({"API_PAGE_SIZE", "API_MAX_PAGE_SIZE", "LAUNCH_BATCH_SIZE", "COUNTER_SHARDS", "BATCH_MAX_CHANGES"}),
    )


def _included(name: str) -> bool:
    if not getattr(settings, "ROOT_URLCONF", None):  # a worker-only settings module includes no URLs
        return False
    try:
        reverse(name)
    except NoReverseMatch:
        return False
    return True


@checks.register(checks.Tags.urls, "tracking")
def check_api(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    if _included("tracking:task-list") and not apps.is_installed("rest_framework"):
        messages.append(
            checks.Error(
                "tracking's API is in your URLs but 'rest_framework' is not in INSTALLED_APPS.",
                hint='Add "rest_framework" to INSTALLED_APPS (its templates render the API in a browser; '
                "without it a browser's request answers 500).",
                id="tracking.E002",
            )
        )
    if _included("tracking:schema"):
        from drf_spectacular.openapi import AutoSchema
        from rest_framework.settings import api_settings

        schema_class = api_settings.DEFAULT_SCHEMA_CLASS  # DRF imports the dotted path itself
        if not (isinstance(schema_class, type) and issubclass(schema_class, AutoSchema)):
            messages.append(
                checks.Error(
                    "tracking's /api/schema/ is in your URLs but DRF's DEFAULT_SCHEMA_CLASS is not drf-spectacular's "
                    "(the schema answers 500).",
                    hint='Set REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema", ...}.',
                    id="tracking.E003",
                )
            )
    return messages
