"""``python manage.py jobs``: the operators' command line (``jobsapp.management.subcommands`` has
the subcommands, their options and output), run as a Django command after Django's start-up."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from jobsapp.management.subcommands import SubcommandError, Subcommands


class Command(Subcommands, BaseCommand):
    requires_system_checks: list[str] = []

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            super().handle(*args, **options)
        except SubcommandError as error:  # nothing was changed: reported as Django reports it, exit status 1
            raise CommandError(str(error)) from error
