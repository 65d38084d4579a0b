"""The tracking app's configuration: its checks, the launcher ``Task.objects`` reaches, and the
``jobs`` command's ``task-cancel``."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "tracking"
    verbose_name = "Task tracking"
    #: ``tracking.launching``, set when the registry is ready: what ``Task.objects.launch`` and
    #: ``add_jobs`` call (the models sit below the launcher, which writes them).
    launching: ModuleType

    def ready(self) -> None:
        from . import (
            checks,  # noqa: F401  (registers the checks)
            launching,  # registers its outbox kind, which any process may relay
        )

        self.launching = launching

    def jobs_subcommands(self) -> list[tuple[str, str, Any, Any]]:
        """What tracking adds to ``manage.py jobs``: ``task-cancel ID``."""
        from .commands import TASK_CANCEL  # models: only once the app registry is ready

        return [TASK_CANCEL]
