"""Tasks the Celery task API tests run on a real worker (settings: tests.celery_sample.settings)."""

from django.apps import AppConfig


class CelerySampleConfig(AppConfig):
    name = "tests.celery_sample"
    label = "celery_sample"
