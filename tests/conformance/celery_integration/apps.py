from django.apps import AppConfig


class CeleryIntegrationConfig(AppConfig):
    """Celery's integration suite's tasks (``ported/t/integration/tasks.py``, made at test time by port.py);
    installed by ``tests.conformance.celery_integration.settings`` in the worker processes."""

    name = "tests.conformance.celery_integration"
    label = "conformance_celery_integration"
