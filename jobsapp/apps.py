"""Django app config: registers system checks and autodiscovers every installed app's jobs.py and
tasks.py (function jobs, django.tasks and Celery-style tasks register themselves when defined)."""

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class JobsAppConfig(AppConfig):
    name = "jobsapp"
    verbose_name = "Background jobs"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the checks)

        autodiscover_modules("jobs", "tasks")
