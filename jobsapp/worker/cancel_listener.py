"""The cancel listener: hears the cancels asked for anywhere and hands each jid to the processor.

Thread ``jobsapp.cancel-listener``, one per worker process, started by the launcher after the
heartbeat and before the manager, stopped after the manager (a job cancelled while the process
drains still stops). It SUBSCRIBEs to ``jobsapp:cancel`` (``keys.CANCEL_CHANNEL``) on a
connection of its own, waits for the subscription to be confirmed, then reads the requests of the
last ``cancellation.RETENTION_SECONDS`` from ``jobsapp:cancelled`` (``keys.CANCELLED``), so a
cancel published while it was not yet (or no longer) subscribed is not lost; then every message's
jids go to ``on_cancel`` (``Processor.cancel``): a job one of this process's threads runs is
interrupted at once, any other jid is remembered and the job ends cancelled if it starts here.
Why pub/sub: ``jobsapp.cancellation``'s header. The latency from ``PUBLISH`` to the interrupt is
a network hop and a lock: the message is read as soon as it arrives (a blocking read of at most
``READ_SECONDS``, which only bounds how soon a stop is noticed).

Failures: Redis gone or the connection dropped: logged once per outage (``Backoff``), the
connection is dropped, and the listener subscribes again and re-reads the requests; the jobs run
on meanwhile (a cancel asked during the outage stops its job when the listener is back). A
message that is not a JSON array of jids is ignored. Nothing here touches a job's payload or its
place in Redis: how a cancelled job ends is the processor's (``JobCancelled``, the door).

Lifecycle (component.py): ``start()``, ``quiet()`` (nothing: cancels still reach the jobs a quiet
process finishes), ``stop(deadline)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import cancellation, keys
from ..backoff import Backoff
from ..clock import SYSTEM_CLOCK, Clock
from ..component import Component
from ..connection import REDIS_ERRORS

if TYPE_CHECKING:
    import redis

logger = logging.getLogger("jobsapp.cancel")

#: The longest blocking read on the subscription: how soon a stop is noticed.
READ_SECONDS = 0.5


class CancelListener(Component):
    """Subscribes to the cancel channel and calls ``on_cancel(jid)`` for each jid it hears."""

    thread_name = "cancel-listener"
    join_seconds = READ_SECONDS + 1.0

    def __init__(
        self,
        *,
        client: redis.Redis,
        make_subscriber: Callable[[], redis.Redis],
        on_cancel: Callable[[str], bool],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(clock=clock)
        self.client = client
        self.make_subscriber = make_subscriber
        self.on_cancel = on_cancel
        self.backoff = Backoff("cancel listener", logger=logger, clock=clock)
        self.subscribed = False  # the subscription is confirmed and the remembered requests read
        self.heard_total = 0
        self.interrupted_total = 0

    def _run(self) -> None:
        while not self.stopping:
            pubsub: Any = None
            try:
                pubsub = self.make_subscriber().pubsub()
                self._subscribe(pubsub)
                self.backoff.succeeded()
                while not self.stopping:
                    message = pubsub.get_message(timeout=READ_SECONDS)
                    if message is not None and message.get("type") == "message":
                        self._hand_over(cancellation.decode(message["data"]))
            except REDIS_ERRORS as exc:  # nothing lost: it subscribes again and re-reads the requests
                self.subscribed = False
                if self.backoff.pause(exc, self._stop):
                    return
            finally:
                if pubsub is not None:
                    self._close(pubsub)
        self.subscribed = False

    def _subscribe(self, pubsub: Any) -> None:
        """Subscribe, wait for the confirmation, then hand over the requests remembered in Redis
        (a cancel published before the confirmation is among them)."""
        pubsub.subscribe(keys.CANCEL_CHANNEL)
        while not self.stopping:
            message = pubsub.get_message(timeout=READ_SECONDS)
            if message is not None and message.get("type") == "subscribe":
                break
            if message is not None and message.get("type") == "message":
                self._hand_over(cancellation.decode(message["data"]))
        since = self.clock.time() - cancellation.RETENTION_SECONDS
        self._hand_over(list(cancellation.recent(self.client, since=since)))
        self.subscribed = True

    def _hand_over(self, jids: list[str]) -> None:
        for jid in jids:
            self.heard_total += 1
            if self.on_cancel(jid):
                self.interrupted_total += 1
                logger.info("jid=%s cancel asked: interrupting the job", jid, extra={"jid": jid})

    @staticmethod
    def _close(pubsub: Any) -> None:
        try:
            pubsub.close()
        except REDIS_ERRORS:  # the connection is gone already
            pass


__all__ = ["READ_SECONDS", "CancelListener"]
