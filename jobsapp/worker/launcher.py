"""The launcher: starts and stops one worker process's components (``WorkerProcess``).

``WorkerProcess.run`` is four steps, each a method: ``connect`` (start steps 1-2), ``build``
(construct every component, start none), ``serve`` (start steps 3-4, then handle signals until
TERM/INT) and ``shutdown``. The parts built are one ``Components`` record.

Start order:
1. wait for Redis (logging, capped backoff) and check it is >= 6.2; warn when
   ``maxmemory-policy`` is not ``noeviction`` (Redis could silently drop queued jobs);
2. claim the supervisor slot and recover the previous occupant's in-flight jobs at once (Redis
   refusing writes, OOM at maxmemory say, is waited out as an outage);
3. first heartbeat (the process appears in ``processes``), then the heartbeat thread, then the
   cancel listener (``cancel_listener``: cancels asked for anywhere reach this process's jobs);
4. the manager (fetcher, acker, processors), the scheduler, the periodic-job ticker (only when
   periodic jobs are defined), the orphan sweeper, the outbox relay (only with ``OUTBOX`` on);
   then server middleware hears ``on_startup`` (``tell_startup``), once per process.

Shutdown order (TERM/INT, or TERM through ``<identity>-signals``):
1. stop the scheduler, the periodic-job ticker, the sweeper and the outbox relay;
2. quiet: stop fetching, put buffered jobs back (TSTP alone stops here);
3. wait up to ``timeout`` for running jobs (a second TERM/INT, a second Ctrl-C, cuts the wait
   short, as in Sidekiq); flush acknowledgements; put every still-running job back at the front
   of its queue;
4. stop the cancel listener; server middleware hears ``on_shutdown`` (``tell_shutdown``); last
   heartbeat clean-up, then exit (the process does not wait for
   stuck job threads).
The timeouts watchdog's hard limit (``TIMEOUT_HARD_LIMIT_SECONDS``) runs the same order at once,
as a second TERM would, after filing the stuck job, and exits with ``EXIT_HARD_LIMIT``.

Fencing (``fence``, on the heartbeat thread) is the one exit that skips that order: a process
that finds it was declared dead (heartbeat.py) interrupts its jobs (timeouts' lease expiry,
async cancellation) and exits with ``EXIT_FENCED`` (or restarts in place with ``-P 1``) without
putting back, acknowledging or releasing anything: its jobs and its limiter slots belong to
other processes now; what it took since it resumed stays in its in-flight list, recovered at
once, with its slots, by the next process in its slot, which also takes the dead identity off
the process list (as it does for a child that crashed).

With ``-P N`` the parent first does what every child would do on its way to its first job
(``prepare_children``: middleware chains, Lua scripts, redis-py's package metadata), then the
supervisor (supervisor.py) forks N children, each running ``run_child``: a
``WorkerProcess`` with its own identity in its own slot; a child the hard limit stopped (exit
``EXIT_HARD_LIMIT``) is restarted by the supervisor. ``-P 1`` has no parent process (signals,
pid and memory are the worker's own): after the hard limit the process executes its own
command line again (``restart_in_place``: same pid, a fresh image without the stuck thread,
a new identity, quiet again when it was), paced like the supervisor's restarts; a TERM or INT
received meanwhile wins and the process exits.

Signals (``install_signal_handlers``; the same set for ``-P 1`` and each ``-P`` child): TERM/INT
stop, TSTP quiets, TTIN dumps the threads; HUP, USR1 and USR2 are logged and ignored, PIPE is
ignored (supervisor.IGNORED_SIGNALS). A ``-P`` child also follows its parent through its
``ParentLink`` (supervisor.py): quiet when the parent is, stopping as on TERM when it is gone.
"""

from __future__ import annotations

import encodings.idna  # noqa: F401  (the codec a connect to a host name needs: imported before -P forks)
import faulthandler
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import redis
import redis.utils

from .. import connection, keys, scripts, shards
from ..backoff import Backoff
from ..clock import SYSTEM_CLOCK, Clock
from ..component import Component
from ..conf import jobs_settings
from ..connection import CONNECTION_ERRORS, REDIS_ERRORS
from ..middleware import client_chain, server_chain, tell_shutdown, tell_startup
from ..periodic import PeriodicScheduler
from ..periodic import definitions as periodic_definitions
from . import aio
from .cancel_listener import CancelListener
from .fetch import BasicFetch, QueueOrder, ReliableFetch, strategy
from .fetch import build as build_fetch
from .heartbeat import Heartbeat, clear_identity, new_identity
from .manager import Manager
from .processor import Processor
from .recovery import Quarantine, Sweeper, claim_slot, recover_list
from .relay import OutboxRelay
from .retry import RetryPolicy
from .scheduler import Scheduler
from .supervisor import (
    IGNORED_SIGNALS,
    MAX_RESTART_DELAY_SECONDS,
    RESTARTS_PER_MINUTE,
    ParentLink,
    Supervisor,
    describe_ignored,
    ignore_unused_signals,
)
from .timeouts import Watchdog

logger = logging.getLogger("jobsapp.launcher")

MINIMUM_REDIS_VERSION = (6, 2)
#: A stop signal this long after the first one is a second Ctrl-C (hurry), not the same one twice.
SECOND_SIGNAL_AFTER_SECONDS = 1.0

#: The most processor threads per process. Past a few hundred, threads only contend for the GIL;
#: a typo such as ``-c 1000000`` must be refused, not grow a process to gigabytes before it
#: starts (and while it ignores TERM).
MAX_CONCURRENCY = 1000
#: The most async jobs running at once per process (each parks a small thread while it awaits).
MAX_ASYNC_CONCURRENCY = 10_000


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask, not the whole machine's), at least 1."""
    counter = getattr(os, "process_cpu_count", None) or os.cpu_count  # process_cpu_count: Python >= 3.13
    return max(1, counter() or 1)


def default_processes() -> int:
    """``-P`` when neither the flag nor ``JOBSAPP["PROCESSES"]`` says: one process per CPU, as
    Sidekiq Enterprise's swarm and Celery's prefork pool do. One Python process runs Python code
    on one core at a time (the GIL), so on N cores N processes drain up to N times as fast."""
    return cpu_count()


def max_processes() -> int:
    """The most ``-P`` children: a typo (``-P 10000``) must not fork the machine to death."""
    return max(64, 4 * cpu_count())


def limits_problem(options: WorkerOptions) -> str | None:
    """Why ``options`` cannot run (a clear message for the command line), or None."""
    if options.concurrency < 1 or options.processes < 1:
        return "-c and -P must be at least 1"
    if not 1 <= options.async_concurrency <= MAX_ASYNC_CONCURRENCY:
        return f"--async-concurrency must be between 1 and {MAX_ASYNC_CONCURRENCY} (async jobs running at once per process)"
    if options.concurrency > MAX_CONCURRENCY:
        return (
            f"-c {options.concurrency} is more threads than a process can use (at most {MAX_CONCURRENCY}): "
            "threads past a few hundred only wait for the GIL; use -P or more runworkers commands for more parallelism"
        )
    if options.processes > max_processes():
        return (
            f"-P {options.processes} is more processes than this machine can run usefully (at most {max_processes()} "
            f"with {cpu_count()} CPUs); run runworkers on more machines instead"
        )
    return None


@dataclass
class WorkerOptions:
    queues: list[str] = field(default_factory=lambda: ["default"])
    concurrency: int = 10
    processes: int = 1
    timeout_seconds: float = 25.0
    tag: str = ""
    labels: list[str] = field(default_factory=list)
    fetch: str = "reliable"
    async_concurrency: int = 100

    @property
    def queue_order(self) -> QueueOrder:
        return QueueOrder.parse(self.queues)


@dataclass
class Components:
    """What one worker process runs, built (``WorkerProcess.build``) before any of it starts."""

    client: redis.Redis
    fetch: ReliableFetch | BasicFetch
    manager: Manager
    heartbeat: Heartbeat
    scheduler: Scheduler
    periodic: PeriodicScheduler | None  # only when periodic jobs are defined for this shard
    sweeper: Sweeper | None  # only with reliable fetch
    relay: OutboxRelay | None = None  # only with JOBSAPP["OUTBOX"] on
    cancel_listener: CancelListener | None = None  # started after the heartbeat, stopped after the manager

    def background(self) -> list[Component]:
        """The components started after the manager and stopped first, in start order."""
        started: list[Component | None] = [self.scheduler, self.periodic, self.sweeper, self.relay]
        return [component for component in started if component is not None]


def redis_version(client: redis.Redis) -> tuple[int, ...]:
    """The oldest version among the masters (the one server without a cluster)."""
    versions = [
        tuple(int(part) for part in str(info.get("redis_version", "0")).split(".")[:2] if part.isdigit())
        for info in connection.master_infos(client, "server").values()
    ]
    return min(versions, default=(0,))


def wait_for_redis(client: redis.Redis, stop: threading.Event, *, clock: Clock = SYSTEM_CLOCK) -> bool:
    """Block until Redis answers (True) or ``stop`` is set (False); one warning while it does not."""
    backoff = Backoff("start", logger=logger, clock=clock, outage=f"waiting for Redis at {connection.describe()}")
    while not stop.is_set():
        try:
            client.ping()
        except CONNECTION_ERRORS as exc:  # not up yet: nothing was done, nothing to undo
            backoff.pause(exc, stop)
            continue
        backoff.succeeded()
        return True
    return False


def check_redis(client: redis.Redis) -> None:
    version = redis_version(client)
    if version < MINIMUM_REDIS_VERSION:
        raise SystemExit(f"Redis {'.'.join(map(str, version))} is too old: jobsapp needs Redis >= 6.2 (BLMOVE, RPOP count)")
    try:
        infos = connection.master_infos(client, "memory")
    except redis.ResponseError:  # INFO restricted (managed Redis): nothing to check
        return
    for where, info in infos.items():
        policy = info.get("maxmemory_policy", "noeviction")
        if policy != "noeviction":
            logger.warning(
                "Redis maxmemory-policy is %r at %s: under memory pressure Redis may evict queued jobs. Set it to 'noeviction'.",
                policy,
                where if connection.is_cluster(client) else connection.describe(),
            )


#: The unused signals (supervisor.IGNORED_SIGNALS) by the names ``on_signal`` receives.
IGNORED_SIGNAL_NAMES = {signal.Signals(signum).name.removeprefix("SIG"): signum for signum in IGNORED_SIGNALS}

#: The exit code of a -P child that found it was declared dead (EX_TEMPFAIL): the supervisor restarts it.
EXIT_FENCED = 75
#: How long a fenced process gives its interrupted jobs (with a timeout, or async) to unwind before it exits.
FENCE_GRACE_SECONDS = 0.2
#: Set across a -P 1 restart in place to the identity the process had: the new image recovers its in-flight list at once.
PREVIOUS_IDENTITY_ENVIRONMENT_KEY = "JOBSAPP_PREVIOUS_IDENTITY"

#: What the timeouts watchdog sends this process when a job outlived the hard limit.
HARD_LIMIT_SIGNAL = "HARD_LIMIT"
#: The exit code of a process stopped by the hard limit (EX_SOFTWARE): the -P supervisor restarts it.
EXIT_HARD_LIMIT = 70


def hard_limit_seconds(reliable: bool) -> float | None:
    """``TIMEOUT_HARD_LIMIT_SECONDS`` for this process: only with reliable fetch, whose in-flight
    list is what puts the process's other jobs back (``--fetch basic`` warns and runs without)."""
    seconds = jobs_settings.TIMEOUT_HARD_LIMIT_SECONDS
    if seconds is not None and not reliable:
        logger.warning("TIMEOUT_HARD_LIMIT_SECONDS is ignored with --fetch basic (no in-flight list to put jobs back from)")
        return None
    return None if seconds is None else float(seconds)


def dump_threads() -> None:
    """TTIN: log every thread's stack."""
    frames = sys._current_frames()
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if frame is None:
            continue
        stack = "".join(traceback.format_stack(frame))
        logger.warning("thread %s (%s):\n%s", thread.name, thread.ident, stack)
    aio.log_tasks()  # where each async job awaits (its lane thread above only shows it parked)


class WorkerProcess:
    """One worker process: identity, heartbeat, manager, scheduler, sweeper."""

    def __init__(
        self,
        options: WorkerOptions,
        *,
        slot_number: int = 0,
        parent: ParentLink | None = None,
        rng: random.Random | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.options = options
        self.clock = clock
        self.slot_number = slot_number
        self.parent = parent  # the -P supervisor (None with -P 1): quiet with it, stop when it is gone
        self._orphaned = False
        self.rng = rng or random.Random()
        self.hostname = socket.gethostname()
        self.identity = new_identity(self.hostname)
        self.stop_requested = threading.Event()
        self.hard_stop = threading.Event()
        self.quiet_requested = threading.Event()
        self.hurry_requested = threading.Event()  # a second TERM/INT: stop waiting for running jobs
        self._stop_requested_at: float | None = None
        self._pending_signals: deque[str] = deque()
        self.exit_code = 0  # EXIT_HARD_LIMIT after a job ignored JobTimeout past the hard limit
        self.stop_signalled = False  # TERM or INT arrived: the operator wants the process gone
        #: Fenced with -P 1: execute the command line again (set by ``run``); a -P child exits instead.
        self.restart_in_place_when_fenced = False

    # Signals arrive from the OS (handler in the main thread) or from the heartbeat thread
    # (through Redis). Both only append to a deque: a signal handler must never take a lock the
    # interrupted main thread may hold (Event.set would), or the process deadlocks.
    def on_signal(self, name: str) -> None:
        self._pending_signals.append(name)

    def _follow_parent(self) -> None:
        """A -P child: quiet when its parent is (a TSTP this child missed, or received before it
        was started); stop as on TERM when the parent is gone, once."""
        parent = self.parent
        if parent is None:
            return
        if parent.quiet() and not self.quiet_requested.is_set():
            self.quiet_requested.set()
        if not self._orphaned and parent.gone():
            self._orphaned = True
            logger.error("the -P supervisor (pid %d) is gone: stopping as on TERM", parent.pid)
            self._pending_signals.append("TERM")

    def _handle_pending_signals(self) -> None:
        self._follow_parent()
        while self._pending_signals:
            name = self._pending_signals.popleft()
            if name in ("TERM", "INT"):
                self.stop_signalled = True
                # With -P, one Ctrl-C reaches a child twice (from the terminal and forwarded by the
                # parent): only a stop signal a second or more after the first one hurries.
                now = self.clock.monotonic()
                if self._stop_requested_at is None:
                    self._stop_requested_at = now
                elif now - self._stop_requested_at >= SECOND_SIGNAL_AFTER_SECONDS:
                    self.hurry_requested.set()
                self.stop_requested.set()
            elif name == "TSTP":
                self.quiet_requested.set()
            elif name == "TTIN":
                dump_threads()
            elif name == HARD_LIMIT_SIGNAL:  # timeouts: a job is stuck in a blocking call; stop now
                logger.error("a job outlived TIMEOUT_HARD_LIMIT_SECONDS: stopping now, running jobs go back to their queues")
                self.exit_code = EXIT_HARD_LIMIT
                self.hurry_requested.set()
                self.stop_requested.set()
            elif name in IGNORED_SIGNAL_NAMES:  # from the OS or pushed by a UI: nothing to do
                logger.warning(describe_ignored(IGNORED_SIGNAL_NAMES[name]))
            else:
                logger.warning("ignoring unknown signal %r", name)

    def stop_asked(self) -> bool:
        """Whether TERM or INT arrived (those still pending included): the process must end."""
        return self.stop_signalled or any(name in ("TERM", "INT") for name in self._pending_signals)

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.on_signal("TERM"))
        signal.signal(signal.SIGINT, lambda *_: self.on_signal("INT"))
        signal.signal(signal.SIGTSTP, lambda *_: self.on_signal("TSTP"))
        signal.signal(signal.SIGTTIN, lambda *_: self.on_signal("TTIN"))
        ignore_unused_signals(lambda signum: self.on_signal(signal.Signals(signum).name.removeprefix("SIG")))

    def _wait_for_redis(self, client: redis.Redis) -> bool:
        return self._wait_in_thread(partial(wait_for_redis, clock=self.clock), client)

    def _wait_in_thread(self, wait: Callable[[redis.Redis, threading.Event], bool], client: redis.Redis) -> bool:
        """Run ``wait`` (which returns once Redis lets it, or when stop is requested) while this
        thread keeps handling signals, so Ctrl-C still stops a worker waiting for Redis."""
        waiter = threading.Thread(target=wait, args=(client, self.stop_requested), name="jobsapp.connect", daemon=True)
        waiter.start()
        while waiter.is_alive():
            waiter.join(0.1)
            self._handle_pending_signals()
        return not self.stop_requested.is_set()

    def _claim_slot(self, client: redis.Redis, stop: threading.Event) -> bool:
        """Claim this process's supervisor slot and recover a dead predecessor's in-flight list,
        waiting out Redis refusing writes (OOM at maxmemory, READONLY, MISCONF) or going away as
        an outage: one warning, capped backoff. True once done, False when stop was requested."""
        backoff = Backoff(
            f"start (claiming slot {self.slot_number})",
            logger=logger,
            clock=self.clock,
            outage=f"Redis at {connection.describe()} refuses or does not answer",
        )
        while not stop.is_set():
            try:
                previous = claim_slot(client, hostname=self.hostname, slot_number=self.slot_number, identity=self.identity)
                inherited = os.environ.get(PREVIOUS_IDENTITY_ENVIRONMENT_KEY)  # this pid's previous image (-P 1 restarted in place)
                for dead in dict.fromkeys(identity for identity in (previous, inherited) if identity):
                    recover_list(client, dead)
                    clear_identity(client, dead)  # off the process list at once, not after its TTL
                os.environ.pop(PREVIOUS_IDENTITY_ENVIRONMENT_KEY, None)
            except REDIS_ERRORS as exc:  # nothing was half-done: each recovery move is one atomic script
                backoff.pause(exc, stop)
                continue
            backoff.succeeded()
            return True
        return False

    def _stopped_while_starting(self) -> bool:
        """Whether TERM/INT arrived during start-up (checked between its steps)."""
        self._handle_pending_signals()
        if self.stop_requested.is_set():
            logger.info("stop requested during start-up: exiting before taking any job")
            return True
        return False

    def run(self) -> int:
        """Start, serve until TERM/INT, shut down; returns the exit code. A stop request during
        start-up exits before any job is taken."""
        client = connection.get_redis()
        if not self.connect(client):
            return 0
        components = self.build(client)
        if self._stopped_while_starting():
            return 0
        self.serve(components)
        self.shutdown(components)
        return self.exit_code

    def connect(self, client: redis.Redis) -> bool:
        """Start steps 1 and 2: wait for Redis, check it, claim the slot (reliable fetch). False
        when a stop was requested meanwhile."""
        if not self._wait_for_redis(client):
            return False
        check_redis(client)
        if self._stopped_while_starting():
            return False
        return not strategy(self.options.fetch).reliable or self._wait_in_thread(self._claim_slot, client)

    def build(self, client: redis.Redis) -> Components:
        """Construct every component, none started: what can be refused (periodic definitions
        raising ImproperlyConfigured) is refused before the process takes a job."""
        options = self.options
        fetch = build_fetch(
            options.fetch,
            self.identity,
            options.queue_order,
            client=client,
            rng=self.rng,
            make_blocking_client=lambda: connection.new_redis(blocking_timeout_seconds=float(jobs_settings.FETCH_BLOCK_SECONDS)),
        )
        reliable = fetch.reliable

        policy = RetryPolicy(client, fetch.inflight_key, rng=self.rng, stop=self.hard_stop)
        watchdog = Watchdog(hard_limit_seconds=hard_limit_seconds(reliable), on_hard_limit=lambda: self.on_signal(HARD_LIMIT_SIGNAL))
        async_lane = aio.AsyncLane(concurrency=options.async_concurrency)
        manager = Manager(
            fetch=fetch,
            processor=Processor(
                policy, quarantine=Quarantine(client, self.identity) if reliable else None, watchdog=watchdog, async_lane=async_lane
            ),
            concurrency=options.concurrency,
            batch_size=int(jobs_settings.FETCH_BATCH_SIZE),
            block_seconds=float(jobs_settings.FETCH_BLOCK_SECONDS),
            stop_event=self.hard_stop,
            async_lane=async_lane,
        )
        info = {
            "hostname": self.hostname,
            "started_at": self.clock.time(),
            "pid": os.getpid(),
            "tag": options.tag,
            "concurrency": options.concurrency,
            "async_concurrency": options.async_concurrency,
            "queues": options.queue_order.names,
            "labels": list(options.labels),
            "identity": self.identity,
            "version": "jobsapp",
        }
        heartbeat = Heartbeat(
            client=client,
            identity=self.identity,
            info=info,
            manager=manager,
            interval_seconds=float(jobs_settings.HEARTBEAT_INTERVAL_SECONDS),
            ttl_seconds=int(jobs_settings.PROCESS_TTL_SECONDS),
            on_signal=self.on_signal,
            reliable=reliable,
            on_fenced=partial(self.fence, watchdog=watchdog, async_lane=async_lane, manager=manager),
            clock=self.clock,
        )
        scheduler = Scheduler(  # with its identity it takes turns: the fleet polls once per SCHEDULER_POLL_INTERVAL_SECONDS
            client=client, identity=self.identity, rng=self.rng, clock=self.clock
        )
        periodic_jobs = [  # ImproperlyConfigured stops the process before it takes jobs
            definition
            for definition in periodic_definitions()
            # with SHARDS, a tick is claimed (and pushed) only on the shard the job routes to
            if shards.route(definition.job_class.wire_name(), definition.queue) == shards.current()
        ]
        periodic = PeriodicScheduler(client=client, jobs=periodic_jobs, clock=self.clock) if periodic_jobs else None
        sweeper = (
            Sweeper(
                client=client,
                identity=self.identity,
                interval_seconds=float(jobs_settings.ORPHAN_SWEEP_INTERVAL_SECONDS),
                lock_seconds=60.0,
                ready=heartbeat.ready_to_judge,
                rng=self.rng,
                clock=self.clock,
            )
            if reliable
            else None
        )
        return Components(
            client=client, fetch=fetch, manager=manager, heartbeat=heartbeat, scheduler=scheduler, periodic=periodic, sweeper=sweeper,
            relay=OutboxRelay.configured(rng=self.rng, clock=self.clock),
            cancel_listener=self.cancel_listener(client, manager.processor),
        )  # fmt: skip

    def cancel_listener(self, client: redis.Redis, processor: Processor) -> CancelListener:
        """The thread through which cancels asked for anywhere reach this process's jobs."""
        return CancelListener(client=client, make_subscriber=lambda: connection.new_redis(), on_cancel=processor.cancel, clock=self.clock)

    def serve(self, components: Components) -> None:
        """Start steps 3 and 4, then handle signals until TERM/INT (TSTP quiets the manager).
        A stop request waits at most for the starts (each returns at once)."""
        options = self.options
        manager, heartbeat = components.manager, components.heartbeat
        self._handle_pending_signals()
        if self.quiet_requested.is_set():  # started after TSTP (a restarted -P child): it takes no job
            logger.info("starting quiet: no job will be fetched")
            manager.quiet()
        heartbeat.start()
        if components.cancel_listener is not None:
            components.cancel_listener.start()
        manager.start()
        for component in components.background():
            component.start()
        logger.info(
            "process %s started: %d threads, queues %s, %s fetch, Redis %s",
            self.identity,
            options.concurrency,
            options.queue_order.describe(),
            options.fetch,
            connection.describe(),
            extra={"identity": self.identity, "concurrency": options.concurrency, "queues": options.queue_order.names},
        )
        tell_startup()
        while not self.stop_requested.is_set():
            time.sleep(0.1)
            self._handle_pending_signals()
            if self.quiet_requested.is_set() and not manager.is_quiet:
                logger.info("quieting: no new jobs will be fetched")
                manager.quiet()
                heartbeat.beat()

    def shutdown(self, components: Components) -> None:
        """The shutdown order of this module's header."""
        options = self.options
        manager, heartbeat, client = components.manager, components.heartbeat, components.client
        deadline = time.monotonic() + options.timeout_seconds
        logger.info("stopping: waiting up to %.0f s for %d running jobs", options.timeout_seconds, len(manager.busy()))
        for component in components.background():
            component.stop()
        manager.quiet()
        heartbeat.beat()
        deadline = self._wait_for_running_jobs(manager, deadline)
        requeued = manager.stop(deadline)
        if components.cancel_listener is not None:
            components.cancel_listener.stop()
        self.hard_stop.set()
        tell_shutdown()
        heartbeat.stop()
        heartbeat.clear()
        if components.fetch.reliable:
            try:
                if not any(client.exists(key) for key in components.fetch.inflight_keys):
                    client.srem(keys.INFLIGHT_INDEX, self.identity)
            except CONNECTION_ERRORS as exc:  # the list (if any) is recovered by a sweeper later
                logger.warning("could not unregister the in-flight list (%s)", exc)
        logger.info(
            "stopped: %d jobs processed (%d failed), %d put back unfinished", manager.processed_total, manager.failed_total, requeued
        )

    def fence(self, reason: str, *, watchdog: Watchdog, async_lane: aio.AsyncLane, manager: Manager) -> None:
        """The heartbeat found this process declared dead (``reason``): other processes own its
        jobs now, and the limiter slots they held were released for others. On the heartbeat
        thread, at once: start no other job (``Manager.fence``), stop the running ones as a lease
        expiry would (``LeaseExpired`` in the sync jobs, the async jobs' coroutines cancelled), give them
        ``FENCE_GRACE_SECONDS`` to unwind, then leave without putting back, acknowledging or
        releasing anything (what it no longer holds is someone else's; what it took since is
        recovered with its in-flight list by the next process in its slot, slots included) and
        restart clean: a -P child exits with ``EXIT_FENCED`` and its supervisor starts a new one
        in the slot; -P 1 executes its command line again. Never returns in a worker."""
        # Every moment a job runs on is a moment over its limits: nothing slow before the exit
        # (the next process in the slot takes this identity off the process list). First no thread
        # starts another job, then the running ones are interrupted: a thread whose job ends now
        # would otherwise take the next one from the queue and run it until the exit
        manager.fence()
        interrupted = watchdog.expire_leases()
        cancelled = async_lane.cancel_running() if manager.occupancy.async_running else 0  # their threads park; nothing files them
        logger.error(
            "process %s was declared dead (%s): its jobs are run by other processes now. %d sync jobs interrupted, %d async "
            "jobs cancelled; restarting with a new identity, nothing it held put back or released by it",
            self.identity,
            reason,
            interrupted,
            cancelled,
        )
        if interrupted:
            give_up_at = time.monotonic() + FENCE_GRACE_SECONDS
            while watchdog.running() and time.monotonic() < give_up_at:
                time.sleep(0.01)
        if self.restart_in_place_when_fenced and not self.stop_asked():
            restart_in_place(quiet=self.quiet_requested.is_set(), previous_identity=self.identity)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if self.stop_asked() else EXIT_FENCED)

    def _wait_for_running_jobs(self, manager: Manager, deadline: float) -> float:
        """Wait until no job runs or ``deadline``; a second TERM/INT ends the wait at once. Returns
        the deadline to hand to ``manager.stop`` (now, when hurried)."""
        while manager.busy() and time.monotonic() < deadline:
            self._handle_pending_signals()
            if self.hurry_requested.is_set():
                logger.warning("second stop signal: putting %d running jobs back now", len(manager.busy()))
                return time.monotonic()
            time.sleep(0.05)
        return deadline


def run_child(options: WorkerOptions, slot_number: int, parent: ParentLink) -> int:
    """One ``-P`` child (in the forked process): a worker process in ``slot_number``."""
    process = WorkerProcess(options, slot_number=slot_number, parent=parent)
    process.install_signal_handlers()
    return process.run()


#: The environment variable carrying the monotonic times of a -P 1 process's restarts in place.
RESTARTS_ENVIRONMENT_KEY = "JOBSAPP_RESTARTED_IN_PLACE_AT"


#: Set (to "1") across a -P 1 restart in place when the process was quiet: it comes back quiet.
QUIET_ENVIRONMENT_KEY = "JOBSAPP_RESTARTED_QUIET"


def restart_in_place(*, quiet: bool = False, previous_identity: str = "", clock: Clock = SYSTEM_CLOCK) -> None:
    """Execute this process's own command line again (``-P 1`` after the hard limit): the same
    pid, a fresh interpreter without the stuck thread, quiet again when it was (``quiet``).
    Paced like the supervisor's restarts (the monotonic clock is the machine's, so it survives
    the exec). Does not return."""
    now = clock.monotonic()
    history = [float(moment) for moment in os.environ.get(RESTARTS_ENVIRONMENT_KEY, "").split(",") if moment]
    history = [moment for moment in history if moment > now - 60] + [now]
    delay_seconds = 0.0
    if len(history) > RESTARTS_PER_MINUTE:  # a crash loop: wait, as the supervisor does for a slot
        delay_seconds = min(MAX_RESTART_DELAY_SECONDS, 2.0 ** (len(history) - RESTARTS_PER_MINUTE))
    logger.error("restarting this worker process in place in %.0f s (-P 1 has no parent process to restart it)", delay_seconds)
    clock.wait(threading.Event(), delay_seconds)
    os.environ[RESTARTS_ENVIRONMENT_KEY] = ",".join(f"{moment:.3f}" for moment in history)
    if quiet:
        os.environ[QUIET_ENVIRONMENT_KEY] = "1"
    if previous_identity:  # the new image recovers what this one left in flight, at once
        os.environ[PREVIOUS_IDENTITY_ENVIRONMENT_KEY] = previous_identity
    logging.shutdown()  # flush every handler: the exec drops what is buffered
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])  # noqa: S606  # our own command line, no shell


def prepare_children() -> None:
    """Before ``-P`` forks: what each child would do for itself on its way to its first job,
    done once in the parent, whose memory the children share (copy-on-write): the middleware
    chains (the project's middleware modules imported), every Lua script read and hashed, and
    the package metadata redis-py reads for each new connection (its ``CLIENT SETINFO``), whose
    first read imports importlib.metadata's parsers and fills its path caches."""
    client_chain()
    server_chain()
    scripts.preload()
    redis.utils.get_lib_version()  # what redis-py reads for each new connection


def run(options: WorkerOptions) -> int:
    """Run workers in the foreground until stopped; returns the exit code."""
    faulthandler.enable()
    if options.processes <= 1:
        process = WorkerProcess(options)
        process.install_signal_handlers()
        process.restart_in_place_when_fenced = True
        if os.environ.pop(QUIET_ENVIRONMENT_KEY, "") == "1":  # restarted in place after TSTP: still quiet
            process.on_signal("TSTP")
        code = process.run()
        if code == EXIT_HARD_LIMIT:
            for signum in (signal.SIGTERM, signal.SIGINT):  # from here on a stop signal ends the process at once
                signal.signal(signum, signal.SIG_DFL)
            if not process.stop_asked():
                restart_in_place(quiet=process.quiet_requested.is_set())
        return code
    prepare_children()
    return Supervisor(processes=options.processes, timeout_seconds=options.timeout_seconds, run_child=partial(run_child, options)).run()
