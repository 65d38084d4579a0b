"""System checks for the engine's settings. Ids are stable: jobsapp.E001 onwards."""

from __future__ import annotations

from typing import Any

from django.core import checks

from .conf import jobs_settings


@checks.register("jobsapp")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    unknown = jobs_settings.unknown_keys()
    if unknown:
        messages.append(
            checks.Error(
                f"Unknown JOBSAPP setting(s): {', '.join(unknown)}.",
                hint="See jobsapp/conf.py for the settings and their defaults.",
                id="jobsapp.E001",
            )
        )
    if jobs_settings.FETCH not in ("reliable", "basic"):
        messages.append(
            checks.Error(
                f"JOBSAPP['FETCH'] is {jobs_settings.FETCH!r}.",
                hint='Use "reliable" (the default, nothing lost on SIGKILL) or "basic" (Sidekiq\'s BRPOP).',
                id="jobsapp.E002",
            )
        )
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    if not isinstance(limit, int) or limit <= 0:
        messages.append(
            checks.Error(
                f"JOBSAPP['MAX_PAYLOAD_BYTES'] is {limit!r}.",
                hint="Use a positive number of bytes (default 1 MiB).",
                id="jobsapp.E003",
            )
        )
    concurrency = jobs_settings.CONCURRENCY
    if not isinstance(concurrency, int) or concurrency < 1:
        messages.append(
            checks.Error(
                f"JOBSAPP['CONCURRENCY'] is {concurrency!r}.",
                hint="Use a positive number of processor threads (default 10).",
                id="jobsapp.E004",
            )
        )
    return messages
