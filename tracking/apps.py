"""The tracking app's configuration: its checks, and the ``jobs`` command's ``task-cancel``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "tracking"
    verbose_name = "Task tracking"

    def ready(self) -> None:
        from . import (
            checks,  # noqa: F401  (registers the checks)
            launching,  # noqa: F401  (registers its outbox kind, which any process may relay)
        )

    def jobs_subcommands(self) -> list[tuple[str, str, Any, Any]]:
        """What tracking adds to ``manage.py jobs``: ``task-cancel ID``."""
        from .commands import TASK_CANCEL  # models: only once the app registry is ready

        return [TASK_CANCEL]
