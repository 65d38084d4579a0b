from django.apps import AppConfig


class TestAppConfig(AppConfig):
    """Jobs used by the test suite; installed only by tests/settings.py (so workers started by
    tests autodiscover tests/testapp/jobs.py)."""

    name = "tests.testapp"
    label = "testapp"
