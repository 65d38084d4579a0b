"""The scheduler: moves due jobs from ``schedule`` and ``retry`` into their queues.

Thread ``jobsapp.scheduler``, one per worker process. Each move is ``schedule_move.lua``: the
due jobs are removed from the set and pushed onto their queue in one atomic script (with a
fresh ``enqueued_at``), so a crash loses nothing and, however many processes poll, each job is
enqueued exactly once. "Due" is judged by the Redis server's clock.

Sidekiq polls every ~5 s on average, so its jobs start 2.5-7.5 s late. This scheduler asks the
script for the earliest remaining score and sleeps exactly until then when that is sooner than
its poll interval (1 s by default, jittered ±25% so processes do not poll in lockstep): a job
known at the last poll starts within milliseconds of its due time. The sleep is computed from
the server's clock, so a skewed local clock does not shift it.
"""

from __future__ import annotations

import logging
import random

import redis

from . import faults, keys
from .backoff import Backoff
from .component import Component
from .conf import jobs_settings
from .connection import CONNECTION_ERRORS
from .scripts import script

logger = logging.getLogger("jobsapp.scheduler")

#: Jobs moved per script call; a full batch means "call again at once".
MOVE_BATCH = 100


class Scheduler(Component):
    thread_name = "scheduler"

    def __init__(self, *, client: redis.Redis, poll_interval_seconds: float, rng: random.Random | None = None) -> None:
        super().__init__()
        self.client = client
        self.poll_interval_seconds = poll_interval_seconds
        self.rng = rng or random.Random()

    def enqueue_due(self) -> tuple[int, float | None]:
        """Move every due job; returns (moved, seconds until the next one is due or None)."""
        move = script("schedule_move")
        moved = 0
        wait: float | None = None
        for set_key in (keys.SCHEDULE, keys.RETRY):
            while True:
                count, next_score, server_now = move(
                    self.client, [set_key, keys.QUEUES], [MOVE_BATCH, "queue:", jobs_settings.DEFAULT_QUEUE]
                )
                moved += int(count)
                if faults.POINT and int(count):
                    faults.reach("during_scheduler_move")
                if int(count) < MOVE_BATCH:
                    break
            if next_score:
                until = float(next_score) - float(server_now)
                wait = until if wait is None else min(wait, until)
        return moved, wait

    def _run(self) -> None:
        backoff = Backoff()
        while not self._stop.is_set():
            try:
                moved, wait = self.enqueue_due()
            except CONNECTION_ERRORS as exc:
                if backoff.failures == 0:
                    logger.warning("scheduler: Redis unavailable (%s); retrying with backoff", exc)
                self._stop.wait(backoff.next_delay())
                continue
            except redis.ResponseError as exc:
                logger.warning("scheduler: Redis refused the move (%s)", exc)
                self._stop.wait(backoff.next_delay())
                continue
            backoff.reset()
            if moved:
                logger.debug("scheduler: enqueued %d due jobs", moved)
            poll = self.poll_interval_seconds * self.rng.uniform(0.75, 1.25)
            sleep = poll if wait is None else max(0.0, min(wait + 0.0005, poll))
            self._stop.wait(sleep)
