from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "tracking"
    verbose_name = "Task tracking"

    def ready(self) -> None:
        from . import (
            checks,  # noqa: F401  (registers the checks)
            launching,  # noqa: F401  (registers its outbox kind, which any process may relay)
        )
