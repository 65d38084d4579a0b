"""The heartbeat: tells Redis, every 5 s, that this process is alive and what it is doing.

Thread ``jobsapp.heartbeat``. One MULTI per beat writes what Sidekiq's launcher writes, so
Sidekiq's Web UI and ``Sidekiq::ProcessSet`` / ``Sidekiq::Workers`` list our processes:

- ``SADD processes <identity>``;
- ``<identity>`` HASH: info (JSON), busy, beat, quiet, rss (KB), rtt_us, concurrency; TTL 60 s;
- ``<identity>:workers`` and ``<identity>:work`` HASH: thread id -> {queue, payload, run_at} of
  each running job (6.4.1 reads the first, later versions the second); TTL 60 s;
- ``RPOP <identity>-signals``: one signal per beat from a UI (TSTP quiet, TERM stop, TTIN dump);
- our own: ``SADD jobsapp:inflight <identity>`` so the orphan sweeper knows the list exists, and
  per-class duration histograms in ``jobsapp:durations:<identity>``.

The TTL is what liveness means: a process that stops beating disappears after 60 s, and only
then may its in-flight jobs be recovered. A beat that fails (Redis away) is logged and retried
on the next tick (logged once per outage, backoff.py). The sweeper judges only after two beats
in a row (``consecutive_beats``), and after an outage long enough for keys to expire (no beat
succeeded for the TTL less two intervals: Redis away or frozen) only once a TTL has passed since
it ended (``ready_to_judge``): such an outage expires every process's key at once, and a live
process on a loaded machine may take more than two intervals to beat again; it is given the TTL
it has at any time.

Fencing (reliable fetch): the heartbeat notices when this process may have been declared dead,
and then calls ``on_fenced`` (the launcher stops the process's jobs and restarts it clean) and
beats no more under this identity:

- a gap: the heartbeat thread did not run for longer than the TTL (SIGSTOP, a frozen VM, a
  machine swapping): another process's sweeper may have recovered the jobs meanwhile. Measured
  between the end of one beat and the start of the next on the monotonic clock, so a Redis that
  froze or went away (a beat that took long or failed) is not a gap: every process waited alike
  and the sweepers wait a TTL after it before judging anyone;
- its in-flight list taken: ``recovery.recover_list`` leaves a verdict (``jobsapp:fenced:<identity>``,
  a day) once it has moved the jobs, and the beat reads it. Positive evidence, not an absence: a
  Redis that lost its data (a FLUSHDB, a restart without persistence) drops the process from
  ``jobsapp:inflight`` too, and the beat's ``SADD`` just registers it again; stopping its running
  jobs there would lose them, since no one else has them. A beat that took longer than the TTL
  is followed by another at once, which sees the verdict.

An expired ``<identity>`` key alone is not taken as a death sentence: a Redis frozen past the TTL
expires every process's key at once while no one is recovered (fault scenario 4).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import keys
from ..clock import SYSTEM_CLOCK, Clock
from ..component import PollingComponent
from ..connection import CONNECTION_ERRORS, REDIS_ERRORS, follow_sentinel_master
from ..payload import compact_json

if TYPE_CHECKING:
    import redis

    from .manager import Manager

logger = logging.getLogger("jobsapp.heartbeat")


def rss_kilobytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):  # not Linux: report 0 rather than fail the beat
        return 0
    return 0


def thread_id(ident: int) -> str:
    """Sidekiq names threads by a short base-36 id."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while ident:
        ident, remainder = divmod(ident, 36)
        text = digits[remainder] + text
    return text or "0"


class Heartbeat(PollingComponent):
    """Thread ``jobsapp.heartbeat``: a beat every ``interval_seconds``, the first one in ``start``."""

    thread_name = "heartbeat"
    logger = logger

    def __init__(
        self,
        *,
        client: redis.Redis,
        identity: str,
        info: dict[str, Any],
        manager: Manager,
        interval_seconds: float,
        ttl_seconds: int,
        on_signal: Callable[[str], None],
        reliable: bool,
        on_fenced: Callable[[str], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(clock=clock)
        self.client = client
        self.identity = identity
        self.info = info
        self.info_json = compact_json(info, allow_nan=True)
        self.manager = manager
        self.interval_seconds = interval_seconds
        self.ttl_seconds = ttl_seconds
        self.on_signal = on_signal
        self.reliable = reliable
        self.consecutive_beats = 0
        self._last_beat_monotonic: float | None = None
        # after an outage long enough for keys to expire: no judging before this moment (monotonic)
        self._judge_from = 0.0
        #: Called once, with the reason, when this process may have been declared dead (reliable fetch).
        self.on_fenced = on_fenced
        self.fenced = False
        self._active_at: float | None = None  # when the last beat ended (succeeded or failed)

    def ready_to_judge(self) -> bool:
        """May this process call others dead? Only after two beats in a row, the last one recent,
        and, after an outage long enough for keys to expire, once a TTL has passed since its end:
        a live process is given the same TTL to beat again that it has at any time (used by the
        orphan sweeper)."""
        last = self._last_beat_monotonic
        now = self.clock.monotonic()
        return self.consecutive_beats >= 2 and last is not None and now - last <= 2 * self.interval_seconds and now >= self._judge_from

    def start(self) -> None:
        self.beat()  # the process is listed before it takes a job
        super().start()

    def first_delay_seconds(self) -> float:
        return self.interval_seconds

    def retry_seconds(self, backoff_seconds: float) -> float:
        return self.interval_seconds  # a failed beat is retried on the next tick

    def poll(self) -> float:
        if self.fenced:
            return self.interval_seconds
        started = self.clock.monotonic()
        if self._active_at is not None and started - self._active_at > self.ttl_seconds:
            self._fence(f"this process did not run for {started - self._active_at:.1f} s, past its heartbeat TTL of {self.ttl_seconds} s")
            return self.interval_seconds
        try:
            follow_sentinel_master()  # with Sentinel: leave a replaced master within a beat
            self._beat()
        finally:  # failed or not, the thread ran: only a stretch with no poll at all is a gap
            self._active_at = self.clock.monotonic()
        if self.clock.monotonic() - started > self.ttl_seconds:  # stalled inside the beat: look again at once
            return 0.0
        return self.interval_seconds

    def _fence(self, reason: str) -> None:
        """This process may have been declared dead: no more beats under this identity, and the
        launcher is told (once). Only with reliable fetch: without an in-flight list no one
        recovers this process's jobs."""
        if self.fenced or not self.reliable or self.on_fenced is None:
            return
        self.fenced = True
        self.on_fenced(reason)

    def beat(self) -> None:
        """One beat now (at start, when quieting, at shutdown); a failure is logged once per outage."""
        try:
            self._beat()
        except REDIS_ERRORS as exc:  # this process keeps working; the next beat tries again
            self.backoff.failed(exc)
            return
        self.backoff.succeeded()

    def _beat(self) -> None:
        busy = self.manager.busy()
        rtt_started = time.perf_counter()
        verdict_position = -1
        try:
            self.client.ping()
            rtt_us = int((time.perf_counter() - rtt_started) * 1_000_000)
            pipe = self.client.pipeline(transaction=True)
            pipe.sadd(keys.PROCESSES, self.identity)
            pipe.hset(
                keys.process(self.identity),
                mapping={
                    "info": self.info_json,
                    "busy": len(busy),
                    "beat": repr(self.clock.time()),
                    "quiet": "true" if self.manager.is_quiet else "false",
                    "rss": rss_kilobytes(),
                    "rtt_us": rtt_us,
                    "concurrency": self.info["concurrency"],
                },
            )
            pipe.expire(keys.process(self.identity), self.ttl_seconds)
            for key in (keys.workers(self.identity), keys.work(self.identity)):
                pipe.unlink(key)
                if busy:
                    pipe.hset(
                        key,
                        mapping={
                            thread_id(ident): compact_json(
                                {
                                    "queue": running.unit.queue,
                                    "payload": running.unit.raw.decode("utf-8", "replace"),
                                    "run_at": int(running.run_at),
                                }
                            )
                            for ident, running in busy
                        },
                    )
                    pipe.expire(key, self.ttl_seconds)
            if self.reliable:
                pipe.sadd(keys.INFLIGHT_INDEX, self.identity)
                verdict_position = len(pipe)
                pipe.exists(keys.fenced(self.identity))
            durations = self.manager.durations.snapshot()
            if durations:
                pipe.hset(keys.job_durations(self.identity), mapping={name: histogram.encode() for name, histogram in durations.items()})
                pipe.expire(keys.job_durations(self.identity), self.ttl_seconds)
            pipe.rpop(keys.signals(self.identity))
            results = pipe.execute()
        except REDIS_ERRORS:
            self.consecutive_beats = 0  # the sweeper waits for two beats in a row again
            raise
        finally:
            self._active_at = self.clock.monotonic()
        if verdict_position >= 0 and results[verdict_position]:
            self._fence("its in-flight list was recovered by another process")
        beaten_at = self.clock.monotonic()
        if self._last_beat_monotonic is not None and beaten_at - self._last_beat_monotonic > 2 * self.interval_seconds:
            # Redis (or this process) stalled without an error (a frozen server, a long GC pause):
            # other processes' heartbeats may have expired meanwhile, so count again from here
            # before the sweeper may call anyone dead (found by fault scenario 4's frozen Redis)
            self.consecutive_beats = 0
            if beaten_at - self._last_beat_monotonic > self.ttl_seconds - 2 * self.interval_seconds:
                # long enough for live processes' keys to expire (their last beats came up to an
                # interval before this one's): each gets a TTL from here to beat again, however
                # loaded the machine, and only one silent that long is judged dead
                self._judge_from = beaten_at + self.ttl_seconds
        self._last_beat_monotonic = beaten_at
        self.consecutive_beats += 1
        signal_name = results[-1]
        if signal_name:
            name = signal_name.decode("utf-8", "replace") if isinstance(signal_name, bytes) else str(signal_name)
            logger.info("signal %s received through %s", name, keys.signals(self.identity))
            self.on_signal(name)

    def clear(self) -> None:
        """At exit: leave the processes set and drop this process's keys (its jobs are back)."""
        try:
            clear_identity(self.client, self.identity)
        except CONNECTION_ERRORS as exc:  # its keys expire on their own within the TTL
            logger.warning("heartbeat: could not clear this process's keys (%s)", exc)


def clear_identity(client: redis.Redis, identity: str) -> None:
    """Take ``identity`` off the process list and drop its heartbeat keys: at its own exit, or
    by the next process in its slot once it is known dead (a crash, a fenced process)."""
    pipe = client.pipeline(transaction=False)
    pipe.srem(keys.PROCESSES, identity)
    # UNLINK as a command: a cluster pipeline refuses multi-key .unlink() (the keys share one slot)
    pipe.execute_command("UNLINK", keys.process(identity), keys.workers(identity), keys.work(identity), keys.job_durations(identity))
    pipe.execute()


def new_identity(hostname: str | None = None) -> str:
    """``hostname:pid:<12 hex>`` as Sidekiq 6.4 names processes."""
    return f"{hostname or socket.gethostname()}:{os.getpid()}:{os.urandom(6).hex()}"
