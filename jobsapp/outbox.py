"""The transactional outbox: a push made inside the project's transaction is written to the
database in that transaction, so a committed job is never lost (``JOBSAPP["OUTBOX"]``).

Producing side, any thread of a web process. ``defer(kind, arguments, jid=...)`` (called by
``jobsapp.transactions`` for ``Job.perform_*`` and the surfaces built on it, and by tracking's
launch) INSERTs one ``OutboxEntry`` (table ``jobsapp_outbox``) in the caller's transaction and
hands ``transaction.on_commit`` the push itself. So:

- rollback: the entry and the push vanish together; nothing is pushed;
- commit: the push is made at once, as without the outbox (no added latency for the worker),
  then marked pushed in Redis (``jobsapp:outbox:pushed``, one ZADD): the relay deletes marked
  entries in bulk, one DELETE a round, so a commit pays no DELETE (a database COMMIT of its own:
  milliseconds on PostgreSQL, docs/benchmarks.md);
- Redis down at commit: the push fails, the entry stays, and the commit is not disturbed
  (nothing is raised out of the ``atomic`` block: the rows and the job are both safe); the
  relay pushes it once Redis answers;
- the process dies after COMMIT, before the push: the entry stays unmarked, and the relay pushes
  it (between the push and the mark: a second time, a duplicate, run as Sidekiq runs one);
- the push fails for another reason (a client middleware raising, Redis refusing the payload):
  the entry is parked with the reason (``parked_at``, ``reason``), shown to operators, never
  tried again on its own.

The relay (``jobsapp.worker.relay``, thread ``jobsapp.outbox_relay`` of ``runworkers``) calls
``relay_due`` about once a second: the marked entries are deleted (and their marks removed), the
unmarked ones older than ``OUTBOX_GRACE_SECONDS`` (their own process had that long to push them)
pushed, oldest first, through the same ``kind``, each deleted right after, so a relay killed
mid-round leaves at most the entry it was pushing to be pushed again. Delivery is
at-least-once and keyed by jid: the jid is chosen before the entry is written and rides in it, so
a second push of an entry is the same job (a unique job's lock refuses it; batches and tracking
count it once).

A kind is a registered name -> handler (``register``), the only way an entry becomes a call:
``push`` and ``push_bulk`` (``jobsapp.client``'s) are built in; tracking registers its own. An
entry naming an unknown kind is parked. With ``OUTBOX`` on but the table missing (a project that
has not migrated), ``enabled`` says False, pushes go through ``transaction.on_commit`` alone as
without the outbox, and the system check jobsapp.W050 says what to run.

Redis keys: ``jobsapp:outbox:pushed`` (ZSET jid -> push time; marks older than a day trimmed),
always on the default shard's Redis, as the relay's lock: one outbox, one relay, however many
shards its entries' jobs go to; the pushes are the client's, each to its job's shard.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction

from . import client, faults, keys, shards
from .conf import jobs_settings
from .connection import REDIS_ERRORS, get_redis
from .errors import PayloadTooLarge, RedisUnavailable, ReplicationTimeout
from .payload import compact_json

if TYPE_CHECKING:  # the ORM itself is a fifth of the operators' command's start-up, which needs none of it
    from django.db import models

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

#: How long a mark outlives an entry the relay never saw (its table emptied by hand, a relay
#: that did not run): then trimmed.
MARK_KEPT_SECONDS = 24 * 3600

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
    only with a migration, which a deploy follows with a restart). A database that does not
    answer raises DatabaseError (asked again next time); a process with no database configured
    (a worker-only host: Django's dummy backend) has no outbox."""
    present = _tables_present.get(using)
    if present is None:
        with _tables_lock:
            try:
                present = TABLE in connections[using].introspection.table_names()
            except ImproperlyConfigured:  # no DATABASES entry: nothing to write to or relay from
                present = False
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
    """Whether pushes deferred to the commit go through the outbox: the setting, and the table
    (not in ``jobsapp.testing``'s fake and inline modes, where pushes never reach Redis)."""
    return bool(jobs_settings.OUTBOX) and client.interceptor is None and table_present(using)


def encode(arguments: dict[str, Any], *, jobs: int = 1) -> str:
    """The entry's JSON; PayloadTooLarge (in the caller, before anything is written) past
    ``MAX_PAYLOAD_BYTES`` times the ``jobs`` it carries."""
    text = compact_json(arguments)
    limit = jobs_settings.MAX_PAYLOAD_BYTES
    if limit and len(text) > limit * max(1, jobs):
        raise PayloadTooLarge(f"the job is {len(text)} bytes encoded, above MAX_PAYLOAD_BYTES ({limit}); nothing was written")
    return text


def defer(kind: str, arguments: dict[str, Any], *, jid: str, jobs: int = 1, using: str = DEFAULT_DB_ALIAS) -> None:
    """Write the entry (``jobs`` jobs under ``jid`` and the next) in the current transaction and
    push it when it commits. Call it only inside the project's transaction with ``enabled()`` true.

    One plain INSERT (no ORM instance, no RETURNING: the entry is found again by its jid), the
    cost a push pays inside the transaction (docs/benchmarks.md)."""
    if kind not in KINDS:
        raise LookupError(f"no outbox kind {kind!r}: register it with jobsapp.outbox.register")
    text = encode(arguments, jobs=jobs)
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(connection), [kind, jid, text, time.time()])
    transaction.on_commit(partial(deliver, kind, arguments, jid=jid, using=using), using=using)


_insert_statements: dict[str, str] = {}


def _insert_sql(connection: Any) -> str:
    """The INSERT of one entry, in the quoting of ``connection``'s database (built once per vendor)."""
    statement = _insert_statements.get(connection.vendor)
    if statement is None:
        quote = connection.ops.quote_name
        columns = ", ".join(quote(column) for column in ("kind", "jid", "arguments", "created_at", "attempts", "reason"))
        statement = f"INSERT INTO {quote(TABLE)} ({columns}) VALUES (%s, %s, %s, %s, 0, '')"  # noqa: S608  # names are ours, values bound
        _insert_statements[connection.vendor] = statement
    return statement


def deliver(kind: str, arguments: dict[str, Any], *, jid: str, using: str = DEFAULT_DB_ALIAS) -> bool:
    """At commit: push, then mark the entry pushed (``mark_pushed``). Never raises: an outage
    leaves the entry to the relay, any other failure parks it with the reason. Whether the push
    was made."""
    if faults.POINT:
        faults.reach("outbox_committed")
    try:
        KINDS[kind](arguments)
    except RedisUnavailable as exc:  # the entry waits for the relay; the commit stands
        logger.warning("outbox entry of jid %s: Redis refused the push at commit, the relay will push it: %s", jid, exc)
        return False
    except ReplicationTimeout as exc:  # written to the master: enqueued, only not yet replicated
        logger.warning("outbox entry of jid %s: %s", jid, exc)
    except Exception as exc:  # noqa: BLE001  # a push that cannot succeed: parked, shown, never retried hot
        park(_entries(using).filter(jid=jid, parked_at__isnull=True), f"{type(exc).__name__}: {exc}")
        logger.error("outbox entry of jid %s could not be pushed and is parked: %s", jid, exc)
        return False
    mark_pushed(jid)
    return True


def mark_pushed(jid: str) -> None:
    """Record in Redis that the entry of ``jid`` was pushed (``jobsapp:outbox:pushed``): the relay
    deletes marked entries in bulk instead of each commit paying a DELETE of its own."""
    try:
        get_redis(shards.DEFAULT).zadd(keys.OUTBOX_PUSHED, {jid: time.time()})
    except REDIS_ERRORS as exc:  # the job is pushed; unmarked, the relay will push it again (a duplicate)
        logger.warning("outbox entry of jid %s was pushed but could not be marked (%s): it may run twice", jid, exc)


def park(entries: models.QuerySet[Any], reason: str) -> None:
    """Move ``entries`` aside with ``reason``: kept and shown, never pushed on their own again."""
    try:
        entries.update(parked_at=time.time(), reason=reason[:10_000])
    except DatabaseError as exc:  # left waiting: the relay will try it (and park it) again
        logger.warning("outbox entry could not be parked (%s): %s", exc, reason)


@dataclass(frozen=True)
class RelayRound:
    """What one ``relay_due`` call did."""

    cleaned: int  # entries pushed at their commit, deleted now
    pushed: int  # entries the relay pushed itself
    parked: int
    full: bool  # as many entries as asked for were read: more may be waiting

    @property
    def again(self) -> bool:
        """Whether another round at once may find more to do."""
        return self.full and bool(self.cleaned or self.pushed or self.parked)


def relay_due(
    *,
    grace_seconds: float,
    limit: int = 1000,
    keep_going: Callable[[], bool] = lambda: True,
    using: str = DEFAULT_DB_ALIAS,
) -> RelayRound:
    """One round of the relay over the ``limit`` oldest waiting entries: delete those marked
    pushed (one DELETE), then push each unmarked one older than ``grace_seconds`` and delete it
    right after; stops early when ``keep_going()`` turns false (the relay lost its lock or is
    stopping). RedisUnavailable propagates (the outage: what is left waits)."""
    rows = list(_entries(using).filter(parked_at__isnull=True).order_by("pk").values_list("pk", "jid", "created_at")[:limit])
    if not rows:
        return RelayRound(cleaned=0, pushed=0, parked=0, full=False)
    client = get_redis(shards.DEFAULT)
    scores = client.zmscore(keys.OUTBOX_PUSHED, [jid for _, jid, _ in rows])
    marked = [(entry_id, jid) for (entry_id, jid, _), score in zip(rows, scores, strict=True) if score is not None]
    if marked:
        _entries(using).filter(pk__in=[entry_id for entry_id, _ in marked]).delete()
        client.zrem(keys.OUTBOX_PUSHED, *[jid for _, jid in marked])
    client.zremrangebyscore(keys.OUTBOX_PUSHED, "-inf", time.time() - MARK_KEPT_SECONDS)
    cutoff = time.time() - grace_seconds
    done = {entry_id for entry_id, _ in marked}
    pushed = parked = 0
    for entry_id, _, created_at in rows:
        if entry_id in done or created_at >= cutoff:
            continue
        if not keep_going():
            break
        fate = _push_left(entry_id, using=using)
        pushed += fate == PUSHED
        parked += fate == PARKED
    return RelayRound(cleaned=len(marked), pushed=pushed, parked=parked, full=len(rows) >= limit)


PUSHED, PARKED, LEFT = "pushed", "parked", "left"
#: The tries of an entry whose push drops the connection while Redis answers (a payload Redis
#: cuts off mid-write), before it is parked: it must not hold up the entries behind it for ever.
ENTRY_TRIES = 3


def _push_left(entry_id: int, *, using: str) -> str:
    """Push one entry its own process did not, and delete it: PUSHED; PARKED when it cannot be
    pushed; LEFT for a later round. RedisUnavailable propagates when Redis does not answer."""
    row = _entries(using).filter(pk=entry_id, parked_at__isnull=True).values_list("kind", "arguments", "attempts").first()
    if row is None:  # deleted or parked meanwhile (an operator)
        return LEFT
    kind, text, attempts = row
    _entries(using).filter(pk=entry_id).update(attempts=attempts + 1)
    handler = KINDS.get(kind)
    if handler is None:
        park(_entries(using).filter(pk=entry_id), f"unknown outbox kind {kind!r} (not registered in this process)")
        return PARKED
    try:
        handler(json.loads(text))
    except RedisUnavailable as exc:
        if not _redis_answers():  # the outage: this entry and the rest wait for the next round
            raise
        if attempts + 1 < ENTRY_TRIES:  # Redis answers others: this entry's own trouble, tried again later
            logger.warning("outbox entry %s: Redis dropped its push (try %d of %d): %s", entry_id, attempts + 1, ENTRY_TRIES, exc)
            return LEFT
        park(_entries(using).filter(pk=entry_id), f"{type(exc).__name__} on each of {ENTRY_TRIES} tries while Redis answered: {exc}")
        logger.error("outbox entry %s could not be pushed in %d tries and is parked: %s", entry_id, ENTRY_TRIES, exc)
        return PARKED
    except ReplicationTimeout as exc:  # enqueued on the master
        logger.warning("outbox entry %s: %s", entry_id, exc)
    except Exception as exc:  # noqa: BLE001  # a push that cannot succeed: parked with the reason
        park(_entries(using).filter(pk=entry_id), f"{type(exc).__name__}: {exc}")
        logger.error("outbox entry %s could not be pushed and is parked: %s", entry_id, exc)
        return PARKED
    if faults.POINT:
        faults.reach("outbox_relay_pushed")
    _entries(using).filter(pk=entry_id).delete()
    return PUSHED


def _redis_answers() -> bool:
    """Whether Redis answers a PING now (after a failed push: an outage, or that push's own trouble)."""
    try:
        return bool(get_redis(shards.DEFAULT).ping())
    except REDIS_ERRORS:  # down: the outage the caller reports
        return False


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


def unpark(entry_id: int, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Give a parked entry back to the relay (its reason fixed: a middleware, a size limit), as a
    fresh one; whether there was such a parked entry."""
    return bool(_entries(using).filter(pk=entry_id, parked_at__isnull=False).update(parked_at=None, reason="", attempts=0))


def discard(entry_id: int, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Delete a parked entry: its job will never be pushed; whether there was such an entry."""
    deleted, _ = _entries(using).filter(pk=entry_id, parked_at__isnull=False).delete()
    return bool(deleted)


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
