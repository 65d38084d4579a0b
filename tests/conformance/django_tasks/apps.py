from django.apps import AppConfig


class DjangoTasksConformanceConfig(AppConfig):
    """Installed only in the workers the suite starts (settings.py), which autodiscover tasks.py."""

    name = "tests.conformance.django_tasks"
    label = "conformance_django_tasks"
