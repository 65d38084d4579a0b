"""Settings of the workers this suite starts: the test settings, plus the ported package of
Django's tests/tasks (port.py; its tasks.py autodiscovered), the TASKS the ported tests use, and
django.tasks' own log lines (the upstream cases read them)."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS, LOGGING

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_suite"]
# QUEUES: [] accepts every queue, as the ported tests need (the worker runs whatever it is given)
TASKS = {"default": {"BACKEND": "jobsapp.django_tasks.JobsBackend", "QUEUES": []}}
LOGGING = {**LOGGING, "loggers": {**LOGGING["loggers"], "django.tasks": {"level": "DEBUG"}}}
