from django.apps import AppConfig


class CeleryConformanceConfig(AppConfig):
    """The tasks of Celery's calling and canvas guides, ported by changing imports only; installed
    by ``tests.conformance.celery.settings`` (the worker processes the conformance tests start)."""

    name = "tests.conformance.celery"
    label = "conformance_celery"
