"""Settings of the worker the django.tasks conformance suite starts: the test settings, plus
this app (its tasks.py) and the TASKS the ported tests use, and django.tasks' own log lines
(the upstream tests read them)."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS, LOGGING

INSTALLED_APPS = [*INSTALLED_APPS, "tests.conformance.django_tasks"]
# QUEUES: [] accepts every queue, as the ported tests need (the worker runs whatever it is given)
TASKS = {"default": {"BACKEND": "jobsapp.django_tasks.JobsBackend", "QUEUES": []}}
LOGGING = {**LOGGING, "loggers": {**LOGGING["loggers"], "django.tasks": {"level": "DEBUG"}}}
