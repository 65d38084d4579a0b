"""The tracking layer's settings: one dict, ``settings.TRACKING``, with documented defaults.

Read on first use and again whenever ``TRACKING`` changes (``override_settings(TRACKING=...)``
takes effect at once).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    # DRF rate for every tracking endpoint, per user (anonymous callers are refused anyway).
    "API_THROTTLE_RATE": "1200/min",
    # Page size of the task and event lists, and the largest ?page_size= a caller may ask for.
    "API_PAGE_SIZE": 50,
    "API_MAX_PAGE_SIZE": 500,
    # How often the progress page polls the summary.
    "PAGE_POLL_INTERVAL_MILLISECONDS": 1000,
    # A running job's progress messages are written at most this often, and none waits longer
    # (the recording thread writes the last one when no other follows); all are written at the end.
    "MESSAGE_FLUSH_INTERVAL_SECONDS": 1.0,
    # Tasks and events inserted per INSERT statement by Task.objects.launch.
    "LAUNCH_BATCH_SIZE": 500,
    # A task of more jobs than this is launched in the background: the caller's transaction
    # writes the task row and pushes one LaunchChunk job per LAUNCH_CHUNK_JOBS jobs, which
    # workers turn into events and pushes (tracking.launching). Smaller tasks are written inline.
    "LAUNCH_INLINE_JOBS": 1000,
    "LAUNCH_CHUNK_JOBS": 1000,
    # Counter rows per task: writers add their deltas to their own shard (tracking.models).
    "COUNTER_SHARDS": 16,
    # Worker threads hand their jobs' transitions to one recording thread per process, which
    # writes them in batches (tracking.writer); False records each one inline, as it happens.
    "BATCH_WRITES": True,
    # The most transitions one batch (one transaction) writes.
    "BATCH_MAX_CHANGES": 2000,
    # How long a job's thread waits for its final status to be committed before going on
    # (the record is then logged as lost, as with any database error).
    "BATCH_WAIT_SECONDS": 60.0,
}


class TrackingSettings:
    """Attribute access to ``settings.TRACKING`` merged over DEFAULTS.

    Read once, then again after any change of ``TRACKING`` (Django's ``setting_changed``, which
    ``override_settings`` sends): a tracked job reads several of these, and the processor threads
    of a busy worker run thousands a second.
    """

    def __init__(self) -> None:
        self._merged: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        merged = self.__dict__.get("_merged")
        if merged is None:
            merged = self._merged = {**DEFAULTS, **(getattr(settings, "TRACKING", {}) or {})}
        try:
            return merged[name]
        except KeyError:
            raise AttributeError(f"unknown tracking setting {name!r}") from None

    def reload(self) -> None:
        self._merged = None


tracking_settings = TrackingSettings()


@receiver(setting_changed)
def _tracking_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "TRACKING":
        tracking_settings.reload()
