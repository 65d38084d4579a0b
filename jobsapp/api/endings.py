"""The operators' endings: what an operator's action took from Redis goes through the "job
ended" door (``jobsapp.ending``), as a worker's ending does.

Runs in the caller's thread (a dashboard request, the ``jobs`` command, a user's script, Celery's
``revoke``), after the removal or move itself succeeded: ``LREM``/``ZREM``/``RPOP``/``ZPOPMIN``
or ``api_kill.lua`` / ``api_move_to_queue.lua`` answered that this call took the job, so two
operators acting on one job tell the door once. A job removed unrun ends ``DELETED`` (``REVOKED``
for Celery's ``revoke``): its unique lock is released, its batch counts it failed and can
complete, its record says failed, server middleware (tracking) hears ``on_dead``. A job an
operator killed ends ``DEAD`` (reason ``operator_killed``). A job moved to its queue ("retry
now", "add to queue") has not ended: it is put back (``on_requeue`` reason ``operator``). A
kill also calls ``JOBSAPP["DEATH_HANDLERS"]``, as Sidekiq's API kill does.

An entry that is not a JSON object (``invalid``) has nothing a feature could read: it is removed
and no one is told. A hook that fails is logged by the door; the removal stands.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import ending
from ..ending import Fate
from ..middleware import call_death_handlers
from ..outcomes import RequeueReason
from .records import JobRecord


def ended(client: Any, records: Iterable[JobRecord], fate: Fate, *, reason: str = "", death_handlers: bool = False) -> None:
    """Tell the door that each of ``records`` (taken by this call) ended with ``fate``; with
    ``death_handlers`` (a kill, as Sidekiq's API kill) the ``DEATH_HANDLERS`` hear it first."""
    for record in records:
        if not record.invalid:
            if death_handlers:
                call_death_handlers(record.item, None)
            ending.finish(client, record.item, fate, reason=reason)


def moved_to_queue(records: Iterable[JobRecord]) -> None:
    """Tell the door that each of ``records`` (moved by this call) waits in its queue again."""
    for record in records:
        if not record.invalid:
            ending.put_back(record.item, reason=RequeueReason.OPERATOR)
