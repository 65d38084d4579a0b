"""The scheduler: moves due jobs from ``schedule`` and ``retry`` into their queues.

Thread ``jobsapp.scheduler``, one per worker process; keys ``schedule``, ``retry``, the queues and
``jobsapp:schedulers``. "Due" is judged by the Redis server's
clock (``TIME``). Each poll reads the members due now (or within the next poll) with a plain
``ZRANGEBYSCORE``; the JSON work (the job's queue, a fresh ``enqueued_at``) is done here in
Python, never in Lua; then ``schedule_move.lua`` removes each job from its set and pushes it
onto its queue in one atomic script, so a crash loses nothing and, however many processes poll,
each job is enqueued exactly once (only the caller whose ZREM succeeds pushes it).

Redis is single-threaded, so nothing here may hold it long whatever the jobs' size: each script
call carries at most ``MOVE_BUDGET_BYTES`` of jobs (at least one job), and the number of
members read per round trip adapts to their size (doubling from 1 up to ``MOVE_BATCH`` while a
batch stays under the budget, halving when it exceeds it), so 100 due jobs of 1 MB are moved
one or two per call instead of in one 100 MB call that held Redis for seconds.

Sidekiq polls every ~5 s on average, so its jobs start 2.5-7.5 s late. This scheduler looks one
poll ahead and sleeps exactly until the next due job when that is sooner than its next poll: a
job known at a poll starts within milliseconds of its due time. The sleep is computed from the
server's clock, so a skewed local clock does not shift it.

The processes share one poll cadence, so that a fleet's idle polling does not grow with its
size (Sidekiq stretches each process's interval by the number of processes for the same reason,
at random). The fleet polls once per ``SCHEDULER_POLL_INTERVAL_SECONDS`` (1 s by default) in
all, the processes in turn: each one records its poll in ``jobsapp:schedulers`` (identity ->
server time) and reads the others', and with N live entries and its rank r among their sorted
identities it polls next at the server time ``r * interval`` past a multiple of ``N * interval``.
Every poll looks ``1.25 * interval`` ahead, more than the fleet's spacing, so a job due later
than one interval after its push is seen by some poll before it is due and is started on time by
the process that saw it; a job due sooner waits at most about one interval, as with one process.
An entry not renewed within two rounds of the cadence (a process killed outright) is ignored and
removed; a stopping process removes its own. While the fleet's size changes, turns may overlap
or leave a gap of about one interval for one round. A scheduler built without an identity (a
test, a tool) polls on its own, every interval jittered ±25 %.

A member that is not a JSON job object (another client's garbage) is pushed as it is onto the
default queue, where the worker files it in the dead set as malformed.
"""

from __future__ import annotations

import logging
import random
from typing import cast

import redis

from .. import faults, keys, scripts
from ..clock import SYSTEM_CLOCK, Clock
from ..component import PollingComponent
from ..conf import jobs_settings
from ..connection import REDIS_ERRORS, as_bytes
from ..payload import decode, encode_unchecked

logger = logging.getLogger("jobsapp.scheduler")

#: The most jobs read per round trip; a full batch of due jobs means "read again at once".
MOVE_BATCH = 100
#: The most bytes of jobs (as stored plus as pushed) one schedule_move.lua call carries, at
#: least one job: Redis copies them while it runs the script, and nothing else runs meanwhile.
MOVE_BUDGET_BYTES = 1_000_000
#: Rounds of the cadence after which a process that has not polled is no longer counted.
STALE_AFTER_ROUNDS = 2
#: Seconds added to that bound: a process's poll may be late by a slow move or a busy GIL.
STALE_SLACK_SECONDS = 5.0


def next_turn_seconds(now: float, *, rank: int, fleet_size: int, interval_seconds: float) -> float:
    """Seconds from ``now`` (server time) to the next turn of the process of rank ``rank`` among
    ``fleet_size`` taking turns every ``interval_seconds``: its turns fall ``rank * interval``
    past each multiple of ``fleet_size * interval``."""
    cycle = fleet_size * interval_seconds
    offset = rank * interval_seconds
    rounds = (now - offset) // cycle + 1
    return offset + rounds * cycle - now


def fleet(entries: list[tuple[bytes, float]], *, now: float, poll_interval_seconds: float) -> tuple[list[str], list[str]]:
    """The live and the stale identities of ``jobsapp:schedulers`` (its members and scores, read
    at server time ``now``), the live ones sorted: their order is the order of their turns. An
    entry not renewed within ``STALE_AFTER_ROUNDS`` rounds of the cadence is stale."""
    everyone = {as_bytes(member).decode(errors="replace"): float(score) for member, score in entries}
    oldest = now - STALE_AFTER_ROUNDS * len(everyone) * poll_interval_seconds - STALE_SLACK_SECONDS
    live = sorted(identity for identity, seen in everyone.items() if seen >= oldest)
    return live, [identity for identity in everyone if identity not in live]


def queue_and_payload(member: bytes, *, enqueued_at: float, default_queue: str) -> tuple[str, bytes]:
    """The queue a due job goes to and the payload to push there: the job with ``enqueued_at``
    set (as Sidekiq's client sets it), or the member as it is when it is not a JSON job."""
    try:
        item = decode(member)
    except ValueError:  # not a job: the worker sends it to the dead set with the reason
        return default_queue, member
    queue = item.get("queue")
    queue = queue if isinstance(queue, str) and queue else default_queue
    item["enqueued_at"] = enqueued_at
    try:
        return queue, encode_unchecked(item)
    except ValueError:  # Infinity or the like from a foreign client: pushed unchanged
        return queue, member


def budget_chunks(moves: list[tuple[bytes, str, bytes]], budget_bytes: int) -> list[list[tuple[bytes, str, bytes]]]:
    """Split moves (member, queue, payload) into script calls of at most ``budget_bytes`` each
    (a move bigger than the budget goes alone)."""
    chunks: list[list[tuple[bytes, str, bytes]]] = []
    current: list[tuple[bytes, str, bytes]] = []
    size = 0
    for move in moves:
        move_bytes = len(move[0]) + len(move[2])
        if current and size + move_bytes > budget_bytes:
            chunks.append(current)
            current, size = [], 0
        current.append(move)
        size += move_bytes
    if current:
        chunks.append(current)
    return chunks


class Scheduler(PollingComponent):
    """Thread ``jobsapp.scheduler``; see the module header. A Redis outage or refusal is logged
    once and retried with backoff (each move is atomic: nothing is half-moved)."""

    thread_name = "scheduler"
    logger = logger

    def __init__(
        self,
        *,
        client: redis.Redis,
        poll_interval_seconds: float | None = None,
        identity: str | None = None,
        rng: random.Random | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(clock=clock)
        self.client = client
        if poll_interval_seconds is None:
            poll_interval_seconds = float(jobs_settings.SCHEDULER_POLL_INTERVAL_SECONDS)
        self.poll_interval_seconds = poll_interval_seconds
        self.identity = identity  # None: polls on its own, not in the fleet's cadence
        self.rng = rng or random.Random()
        self._last_server_now: float | None = None
        #: the live schedulers the last poll saw (this one included)
        self.fleet_size = 1
        # members read per round trip, per set: adapts to the jobs' size (see the header)
        self._batch_sizes: dict[str, int] = {keys.SCHEDULE: 1, keys.RETRY: 1}

    def _server_now(self) -> float:
        seconds, microseconds = self.client.time()
        now = self._last_server_now = int(seconds) + int(microseconds) / 1_000_000
        return now

    def _adapt(self, set_key: str, read: int, read_bytes: int) -> None:
        size = self._batch_sizes[set_key]
        if read_bytes > MOVE_BUDGET_BYTES:
            self._batch_sizes[set_key] = max(1, size // 2)
        elif read == size and read_bytes * 2 <= MOVE_BUDGET_BYTES:
            self._batch_sizes[set_key] = min(MOVE_BATCH, size * 2)

    def _move(self, set_key: str, members: list[bytes], *, now: float) -> int:
        default_queue = str(jobs_settings.DEFAULT_QUEUE)
        moves = []
        for member in members:
            queue, payload = queue_and_payload(member, enqueued_at=now, default_queue=default_queue)
            moves.append((member, queue, payload))
        moved = 0
        for chunk in budget_chunks(moves, MOVE_BUDGET_BYTES):
            moved += scripts.schedule_move(self.client, set_key=set_key, moves=chunk)
        return moved

    def enqueue_due(self, *, horizon_seconds: float | None = None) -> tuple[int, float | None]:
        """Move every due job; returns (moved, seconds until the next job is due, or None when
        none is due within ``horizon_seconds``, by default the longest poll interval)."""
        horizon = self.poll_interval_seconds * 1.25 if horizon_seconds is None else horizon_seconds
        moved = 0
        wait: float | None = None
        for set_key in (keys.SCHEDULE, keys.RETRY):
            while True:
                now = self._server_now()
                batch = self._batch_sizes[set_key]
                replies = cast(
                    "list[tuple[bytes, float]]",
                    self.client.zrangebyscore(set_key, "-inf", repr(now + horizon), start=0, num=batch, withscores=True),
                )
                members = [(as_bytes(member), float(score)) for member, score in replies]
                self._adapt(set_key, len(members), sum(len(member) for member, _ in members))
                due = [member for member, score in members if score <= now]
                if due:
                    count = self._move(set_key, due, now=now)
                    moved += count
                    if faults.POINT and count:
                        faults.reach("during_scheduler_move")
                if len(due) < len(members):  # the earliest job not yet due: sleep until it is
                    until = min(score for _, score in members if score > now) - now
                    wait = until if wait is None else min(wait, until)
                    break
                if len(members) < batch:
                    break
        return moved, wait

    def poll(self) -> float:
        """Move what is due; the seconds until the next poll (sooner when a job is due sooner)."""
        moved, wait = self.enqueue_due()
        if moved:
            logger.debug("scheduler: enqueued %d due jobs", moved)
        if self.identity is None or self._last_server_now is None:
            turn = self.poll_interval_seconds * self.rng.uniform(0.75, 1.25)
        else:
            turn = self._take_turn(self.identity, self._last_server_now)
        return turn if wait is None else max(0.0, min(wait + 0.0005, turn))

    def _take_turn(self, identity: str, now: float) -> float:
        """Record this poll in ``jobsapp:schedulers`` and read the fleet; the seconds until this
        process's next turn (see the module's header)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(keys.SCHEDULERS, {identity: now})
        pipe.zrange(keys.SCHEDULERS, 0, -1, withscores=True)
        _, entries = pipe.execute()
        live, stale = fleet(entries, now=now, poll_interval_seconds=self.poll_interval_seconds)
        if stale:  # killed outright: their turns go to the others
            self.client.zrem(keys.SCHEDULERS, *stale)
        self.fleet_size = len(live)
        return next_turn_seconds(now, rank=live.index(identity), fleet_size=len(live), interval_seconds=self.poll_interval_seconds)

    def _run(self) -> None:
        super()._run()
        if self.identity is not None:
            try:
                self.client.zrem(keys.SCHEDULERS, self.identity)  # its turns go to the others at once
            except REDIS_ERRORS:  # Redis away at shutdown: the entry goes stale and is removed by the others
                pass
