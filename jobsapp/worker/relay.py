"""The outbox relay: pushes the outbox entries their own process did not (``jobsapp.outbox``).

Thread ``jobsapp.outbox_relay``, one per worker process, started by the launcher only when
``JOBSAPP["OUTBOX"]`` is on. One relay works at a time across the fleet: each round it takes or
renews ``jobsapp:lock:outbox_relay`` (``relay_lock.lua``, TTL ``OUTBOX_RELAY_LOCK_SECONDS``), so a
relay killed while holding it is replaced once the TTL runs out; the others only ask for the
lock each round. The holder reads the oldest 1,000 waiting entries, deletes in one statement those
their own process pushed at commit (marked in ``jobsapp:outbox:pushed``), and pushes the others
once they are older than ``OUTBOX_GRACE_SECONDS`` (their process had that long to push them),
oldest first, each deleted right after its push; it renews the lock every round, and during a
round every third of the lock's TTL, and stops a round when it lost the lock or is stopping.

Failures: Redis down is an outage (logged once, backed off: the entries wait, nothing is
lost); the database down likewise. A relay killed mid-batch leaves at most the entry it was
pushing between its push and its DELETE: the next holder pushes it again (a duplicate, run as
Sidekiq runs one, keyed by the same jid). An entry that cannot be pushed for any other reason is
parked with its reason by ``jobsapp.outbox`` and never tried again on its own.

Lifecycle (component.py): ``start()``, ``quiet()`` (nothing to quiet: an entry is pushed whole),
``stop(deadline)``, which releases the lock so another relay takes over at once.
"""

from __future__ import annotations

import logging
import os
import random

import redis
from django.db import DatabaseError, close_old_connections, connections

from .. import connection, outbox, scripts, shards
from ..backoff import Backoff
from ..clock import SYSTEM_CLOCK, Clock
from ..component import PollingComponent
from ..conf import jobs_settings
from ..connection import REDIS_ERRORS
from ..errors import RedisUnavailable

logger = logging.getLogger("jobsapp.outbox_relay")

#: Entries read per round (the lock is renewed between rounds).
BATCH_SIZE = 1000
#: The longest wait between two rounds.
MAX_INTERVAL_SECONDS = 1.0
#: The longest wait between two tries through an outage.
OUTAGE_RETRY_CAP_SECONDS = 2.0


class OutboxRelay(PollingComponent):
    """Thread ``jobsapp.outbox_relay``: one relay at a time pushes what the outbox still holds."""

    thread_name = "outbox_relay"
    logger = logger
    outage_errors = (*REDIS_ERRORS, RedisUnavailable, DatabaseError)

    def __init__(
        self,
        *,
        client: redis.Redis,
        grace_seconds: float,
        lock_seconds: float,
        rng: random.Random | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(clock=clock)
        # Through an outage it asks every 2 s at most (one command): a committed job waits for
        # Redis's return by that much, not by the engine's usual 5 s cap.
        self.backoff = Backoff(self.thread_name, logger=logger, clock=clock, cap_seconds=OUTAGE_RETRY_CAP_SECONDS)
        self.client = client
        self.grace_seconds = grace_seconds
        self.lock_seconds = lock_seconds
        self.rng = rng or random.Random()
        self.token = os.urandom(8).hex()
        self.pushed_total = 0
        self.parked_total = 0
        self._renewed_at = clock.monotonic()

    @classmethod
    def configured(cls, *, rng: random.Random, clock: Clock = SYSTEM_CLOCK) -> OutboxRelay | None:
        """The relay the settings ask for: one with ``OUTBOX`` on, None otherwise. Its lock is on
        the default shard's Redis, whichever shard this process serves: one outbox, one relay."""
        if not jobs_settings.OUTBOX:
            return None
        grace_seconds = float(jobs_settings.OUTBOX_GRACE_SECONDS)
        client = connection.get_redis(shards.DEFAULT)
        return cls(
            client=client, grace_seconds=grace_seconds, lock_seconds=float(jobs_settings.OUTBOX_RELAY_LOCK_SECONDS), rng=rng, clock=clock
        )

    def interval_seconds(self) -> float:
        """Between rounds: at most a second, and well inside the lock's TTL (jittered)."""
        return min(MAX_INTERVAL_SECONDS, self.lock_seconds / 3) * self.rng.uniform(0.8, 1.2)

    def first_delay_seconds(self) -> float:
        return self.interval_seconds()  # a fleet starting together does not ask for the lock at once

    def holds_lock(self) -> bool:
        return scripts.relay_lock(self.client, token=self.token, ttl_seconds=self.lock_seconds)

    def poll(self) -> float:
        close_old_connections()  # a connection the database dropped, or past CONN_MAX_AGE
        try:
            self.relay()
        except DatabaseError:
            connections.close_all()  # a broken connection is not reused by the next round
            raise
        return self.interval_seconds()

    def relay(self) -> int:
        """Batches until none is full, while this relay holds the lock; returns entries pushed."""
        pushed = 0
        if not outbox.table_present():  # not migrated: said once (jobsapp.W050); nothing to relay
            return 0
        while not self.stopping and self.holds_lock():
            self._renewed_at = self.clock.monotonic()
            done = outbox.relay_due(grace_seconds=self.grace_seconds, limit=BATCH_SIZE, keep_going=self.keep_going)
            pushed += done.pushed
            self.pushed_total += done.pushed
            self.parked_total += done.parked
            if done.pushed or done.parked:
                logger.info("outbox relay: %d pushed, %d parked", done.pushed, done.parked)
            if not done.again:
                break
        return pushed

    def keep_going(self) -> bool:
        """Between two pushes of a round: whether to push the next. A round slower than a third
        of the lock's TTL (a slow database, a loaded machine) renews the lock on its way, and
        stops if another relay holds it: two relays never push the same entries for long."""
        if self.stopping:
            return False
        if self.clock.monotonic() - self._renewed_at < self.lock_seconds / 3:
            return True
        self._renewed_at = self.clock.monotonic()
        return self.holds_lock()

    def _run(self) -> None:
        try:
            super()._run()
        finally:
            connections.close_all()  # this thread's own database connections

    def stop(self, deadline: float | None = None) -> None:
        super().stop(deadline)
        try:
            scripts.relay_unlock(self.client, token=self.token)
        except REDIS_ERRORS as exc:  # the lock expires on its own after its TTL
            logger.debug("outbox relay: could not release the lock (%s)", exc)
