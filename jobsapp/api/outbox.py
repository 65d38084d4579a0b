"""The transactional outbox as operators see it (``jobsapp.outbox``): how many committed pushes
wait for the relay, how old the oldest one is, and the parked ones with their reasons.

Reads the database, not Redis (the outbox is the project's table ``jobsapp_outbox``). ``state``
is None when ``JOBSAPP["OUTBOX"]`` is off or the table was never migrated; a database that does
not answer is None as well (the dashboard shows the rest of its page).

    from jobsapp import api
    api.Outbox.state()          # OutboxState(depth, oldest_created_at, parked) or None
    api.Outbox.parked()         # [ParkedEntry(entry_id, kind, jid, parked_at, reason), ...]
    api.Outbox.retry(entry_id)  # a parked entry back to the relay (once its cause is fixed)
    api.Outbox.discard(entry_id)  # a parked entry deleted: its job is never pushed
"""

from __future__ import annotations

import logging

from django.db import DatabaseError

from .. import outbox
from ..conf import jobs_settings
from ..outbox import OutboxState, ParkedEntry

logger = logging.getLogger("jobsapp.api")

__all__ = ["Outbox", "OutboxState", "ParkedEntry"]


class Outbox:
    """The outbox's figures, read afresh on every call."""

    @staticmethod
    def state() -> OutboxState | None:
        """Entries waiting, the oldest one's creation time, the parked count; None when off."""
        if not jobs_settings.OUTBOX:
            return None
        try:
            return outbox.state()
        except DatabaseError as exc:  # the database is down: the page shows the rest
            logger.warning("the outbox could not be read: %s", exc)
            return None

    @staticmethod
    def retry(entry_id: int) -> bool:
        """Give a parked entry back to the relay, as a fresh one; whether it was parked."""
        return outbox.unpark(entry_id)

    @staticmethod
    def discard(entry_id: int) -> bool:
        """Delete a parked entry (its job is never pushed); whether it was parked."""
        return outbox.discard(entry_id)

    @staticmethod
    def parked(limit: int = 50) -> list[ParkedEntry]:
        """The parked entries, newest first: pushes that cannot succeed, kept with their reason."""
        if not jobs_settings.OUTBOX:
            return []
        try:
            return outbox.parked(limit)
        except DatabaseError as exc:  # the database is down: nothing to show
            logger.warning("the outbox could not be read: %s", exc)
            return []
