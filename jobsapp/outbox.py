"""The transactional outbox: a push made inside the project's transaction is written to the
database in that transaction, so a committed job is never lost (``JOBSAPP["OUTBOX"]``).

Producing side, any thread of a web process. ``defer(kind, arguments, jid=...)`` (called by
``jobsapp.transactions`` for ``Job.perform_*`` and the surfaces built on it, and by tracking's
launch) INSERTs one ``OutboxEntry`` (table ``jobsapp_outbox``) in the caller's transaction and
hands ``transaction.on_commit`` the push itself. So:

- rollback: the entry and the push vanish together; nothing is pushed;
- commit: the push is made at once, as without the outbox (no added latency for the worker),
  then the entry is deleted (one autocommit DELETE);
- Redis down at commit: the push fails, the entry stays, and the commit is not disturbed
  (nothing is raised out of the ``atomic`` block: the rows and the job are both safe); the
  relay pushes it once Redis answers;
- the process dies after COMMIT, before the push or the DELETE: the entry stays, and the relay
  pushes it (perhaps a second time: a duplicate, run as Sidekiq runs one);
- the push fails for another reason (a client middleware raising, Redis refusing the payload):
  the entry is parked with the reason (``parked_at``, ``reason``), shown to operators, never
  tried again on its own.

The relay (``jobsapp.worker.relay``, thread ``jobsapp.outbox_relay`` of ``runworkers``) calls
``relay_due``: entries older than ``OUTBOX_GRACE_SECONDS`` (their own process had that long to
push them), oldest first, each pushed through the same ``kind`` and deleted right after, so a relay
killed mid-batch leaves at most the entry it was pushing to be pushed again. Delivery is
at-least-once and keyed by jid: the jid is chosen before the entry is written and rides in it, so
a second push of an entry is the same job (a unique job's lock refuses it; batches and tracking
count it once).

A kind is a registered name -> handler (``register``), the only way an entry becomes a call:
``push`` and ``push_bulk`` (``jobsapp.client``'s) are built in; tracking registers its own. An
entry naming an unknown kind is parked. With ``OUTBOX`` on but the table missing (a project that
has not migrated), ``enabled`` says False, pushes go through ``transaction.on_commit`` alone as
without the outbox, and the system check jobsapp.W050 says what to run.

Redis keys: none here (the pushes are the client's; the relay's lock is the relay's).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.apps import apps
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, models, transaction

from . import client, faults
from .conf import jobs_settings
from .errors import PayloadTooLarge, RedisUnavailable, ReplicationTimeout
from .payload import compact_json

logger = logging.getLogger("jobsapp.outbox")

#: ``jobsapp.models.OutboxEntry``'s table.
TABLE = "jobsapp_outbox"


def _entries(using: str) -> models.QuerySet[Any]:
    """``OutboxEntry`` rows on ``using``. The model is looked up in the app registry: this module
    is imported with ``jobsapp`` itself, before Django may import any app's models."""
    return apps.get_model("jobsapp", "OutboxEntry").objects.using(using)


#: kind -> handler(arguments): what an entry's push is. Handlers raise RedisUnavailable for an
#: outage (the entry waits) and anything else for a push that cannot succeed (the entry is parked).
KINDS: dict[str, Callable[[dict[str, Any]], Any]] = {}

_tables_present: dict[str, bool] = {}
_tables_lock = threading.Lock()


def register(kind: str, handler: Callable[[dict[str, Any]], Any]) -> None:
    """Make ``kind`` an entry kind: at commit, and in the relay, ``handler(arguments)`` pushes it."""
    KINDS[kind] = handler


def _push(arguments: dict[str, Any]) -> Any:
    return client.push(arguments["item"])


def _push_bulk(arguments: dict[str, Any]) -> Any:
    return client.push_bulk(arguments["item"], batch_size=int(arguments.get("batch_size", 1000)))


register("push", _push)
register("push_bulk", _push_bulk)


def table_present(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether the outbox table exists on ``using`` (asked once per process: the answer changes
    only with a migration, which a deploy follows with a restart)."""
    present = _tables_present.get(using)
    if present is None:
        with _tables_lock:
            present = TABLE in connections[using].introspection.table_names()
            _tables_present[using] = present
        if not present:
            logger.warning(
                "JOBSAPP['OUTBOX'] is on but the table %s does not exist on database %r: pushes wait for the commit "
                "without the outbox; run `manage.py migrate jobsapp` (system check jobsapp.W050)",
                TABLE,
                using,
            )
    return present


def forget_tables() -> None:
    """Ask again whether the table exists (after a migration in the same process: tests)."""
    _tables_present.clear()


def enabled(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether pushes deferred to the commit go through the outbox: the setting, and the table."""
    return bool(jobs_settings.OUTBOX) and table_present(using)


def encode(arguments: dict[str, Any], *, jobs: int = 1) -> str:
    """The entry's JSON; PayloadTooLarge (in the caller, before anything is written) past
    ``MAX_PAYLOAD_BYTES`` times the ``jobs`` it carries."""
    text = compact_json(arguments)
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    if limit and len(text) > limit * max(1, jobs):
        raise PayloadTooLarge(f"the job is {len(text)} bytes encoded, above MAX_PAYLOAD_BYTES ({limit}); nothing was written")
    return text


def defer(kind: str, arguments: dict[str, Any], *, jid: str, jobs: int = 1, using: str = DEFAULT_DB_ALIAS) -> int:
    """Write the entry (``jobs`` jobs under ``jid`` and the next) in the current transaction and
    push it when it commits; returns its id. Call it only inside the project's transaction with
    ``enabled()`` true."""
    if kind not in KINDS:
        raise LookupError(f"no outbox kind {kind!r}: register it with jobsapp.outbox.register")
    text = encode(arguments, jobs=jobs)
    entry_id = _entries(using).create(kind=kind, jid=jid, arguments=text, created_at=time.time()).pk
    transaction.on_commit(partial(deliver, entry_id, kind, arguments, using=using), using=using)
    return int(entry_id)


def deliver(entry_id: int, kind: str, arguments: dict[str, Any], *, using: str = DEFAULT_DB_ALIAS) -> bool:
    """At commit: push, then delete the entry. Never raises: an outage leaves the entry to the
    relay, any other failure parks it with the reason. Whether the push was made."""
    if faults.POINT:
        faults.reach("outbox_committed")
    try:
        KINDS[kind](arguments)
    except RedisUnavailable as exc:  # the entry waits for the relay; the commit stands
        logger.warning(
            "outbox entry %s (jid %s): Redis refused the push at commit, the relay will push it: %s", entry_id, _jid(arguments), exc
        )
        return False
    except ReplicationTimeout as exc:  # written to the master: enqueued, only not yet replicated
        logger.warning("outbox entry %s: %s", entry_id, exc)
    except Exception as exc:  # noqa: BLE001  # a push that cannot succeed: parked, shown, never retried hot
        park(entry_id, f"{type(exc).__name__}: {exc}", using=using)
        logger.error("outbox entry %s (jid %s) could not be pushed and is parked: %s", entry_id, _jid(arguments), exc)
        return False
    _delete(entry_id, using=using)
    return True


def _jid(arguments: dict[str, Any]) -> str:
    jid = arguments.get("item", {}).get("jid")
    return str(jid[0] if isinstance(jid, list) and jid else jid)


def _delete(entry_id: int, *, using: str) -> None:
    try:
        _entries(using).filter(pk=entry_id).delete()
    except DatabaseError as exc:  # the job is pushed; the relay will push the entry again (a duplicate)
        logger.warning("outbox entry %s was pushed but could not be deleted (%s): it may run twice", entry_id, exc)


def park(entry_id: int, reason: str, *, using: str = DEFAULT_DB_ALIAS) -> None:
    """Move an entry aside with ``reason``: kept and shown, never pushed on its own again."""
    try:
        _entries(using).filter(pk=entry_id).update(parked_at=time.time(), reason=reason[:10_000])
    except DatabaseError as exc:  # left waiting: the relay will try it (and park it) again
        logger.warning("outbox entry %s could not be parked (%s)", entry_id, exc)


@dataclass(frozen=True)
class RelayRound:
    """What one ``relay_due`` call did."""

    pushed: int
    parked: int
    full: bool  # as many entries as asked for were due: more may be waiting


def relay_due(
    *, grace_seconds: float, limit: int = 100, keep_going: Callable[[], bool] = lambda: True, using: str = DEFAULT_DB_ALIAS
) -> RelayRound:
    """Push the entries older than ``grace_seconds``, oldest first, at most ``limit``, each deleted
    right after its push; stops early when ``keep_going()`` turns false (the relay lost its lock
    or is stopping). RedisUnavailable propagates (the outage: what is left waits)."""
    cutoff = time.time() - grace_seconds
    rows = list(
        _entries(using)
        .filter(parked_at__isnull=True, created_at__lt=cutoff)
        .order_by("pk")
        .values_list("pk", "kind", "arguments", "attempts")[:limit]
    )
    pushed = parked = 0
    for entry_id, kind, text, attempts in rows:
        if not keep_going():
            break
        _entries(using).filter(pk=entry_id).update(attempts=attempts + 1)
        handler = KINDS.get(kind)
        if handler is None:
            park(entry_id, f"unknown outbox kind {kind!r} (not registered in this process)", using=using)
            parked += 1
            continue
        try:
            handler(json.loads(text))
        except RedisUnavailable:  # the outage: this entry and the rest wait for the next round
            raise
        except ReplicationTimeout as exc:  # enqueued on the master
            logger.warning("outbox entry %s: %s", entry_id, exc)
        except Exception as exc:  # noqa: BLE001  # a push that cannot succeed: parked with the reason
            park(entry_id, f"{type(exc).__name__}: {exc}", using=using)
            logger.error("outbox entry %s could not be pushed and is parked: %s", entry_id, exc)
            parked += 1
            continue
        if faults.POINT:
            faults.reach("outbox_relay_pushed")
        _entries(using).filter(pk=entry_id).delete()
        pushed += 1
    return RelayRound(pushed=pushed, parked=parked, full=len(rows) >= limit)


@dataclass(frozen=True)
class OutboxState:
    """What operators see: entries waiting (``depth``), the oldest one's age, the parked ones."""

    depth: int
    oldest_created_at: float | None
    parked: int

    def oldest_age_seconds(self, now: float | None = None) -> float | None:
        if self.oldest_created_at is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.oldest_created_at)


def state(using: str = DEFAULT_DB_ALIAS) -> OutboxState | None:
    """The outbox's depth, oldest entry and parked count; None when the table does not exist."""
    if not table_present(using):
        return None
    entries = _entries(using)
    waiting = entries.filter(parked_at__isnull=True)
    oldest = waiting.order_by("pk").values_list("created_at", flat=True).first()
    return OutboxState(depth=waiting.count(), oldest_created_at=oldest, parked=entries.filter(parked_at__isnull=False).count())


@dataclass(frozen=True)
class ParkedEntry:
    entry_id: int
    kind: str
    jid: str
    parked_at: float
    reason: str


def parked(limit: int = 50, using: str = DEFAULT_DB_ALIAS) -> list[ParkedEntry]:
    """The parked entries, newest first (at most ``limit``)."""
    if not table_present(using):
        return []
    rows = (
        _entries(using)
        .filter(parked_at__isnull=False)
        .order_by("-parked_at")
        .values_list("pk", "kind", "jid", "parked_at", "reason")[:limit]
    )
    return [ParkedEntry(int(pk), kind, jid, float(at), reason) for pk, kind, jid, at, reason in rows]
