"""The recording thread: one per worker process, writing its processor threads' transitions in batches.

Thread ``tracking.writer``, started on the first tracked job a process runs (so after
``runworkers -P`` has forked). Processor threads hand it ``transitions.Change`` objects through
``record_change``; it takes everything queued (up to ``BATCH_MAX_CHANGES``) and applies it with
``launching.apply`` in one transaction, in the order submitted, then takes what queued meanwhile
(group commit: the busier the process, the bigger the batches). Counts go to this process's own
counter shard. It keeps its database connection open while busy and closes it when idle.

What waits and what does not, and why no event can stay ``working`` for a job that finished:

- ``working`` (``START``) and progress messages do not wait. If the same job's final status is
  queued before the batch is written, both go out in one UPDATE (the event never shows
  ``working``: it was too short to see).
- A final status (``finish``, ``failed``, ``error``) and the engine's decisions (retry, dead,
  requeue) wait until their batch is committed before the processor thread goes on; in a
  worker's processor thread a ``finish``, ``failed`` or ``cancelled`` that the job's ack follows
  does not wait there: it holds the ack instead (``record_change_held``, ``jobsapp.hold_ack``),
  which the acker sends only once the batch is committed, and the thread takes its next job. The engine
  acknowledges a job only after its processor thread returns, so a job whose ack reached Redis
  has its final status committed. If the process is SIGKILLed first, whatever was queued is lost
  with it, but those jobs were not acknowledged: they run again (orphan recovery) and record
  again; a duplicate finds a final event and changes nothing.
- A batch that fails (a database error) is rolled back as a whole and retried; then its changes
  are applied one by one, so one bad change cannot lose the others. A change that still fails is
  logged and its waiting thread gets the error, as with any database error while recording:
  tracking never decides a job's fate.

Progress messages a job buffers (``tracking.progress``) are never held longer than
``MESSAGE_FLUSH_INTERVAL_SECONDS``: the first message of a batch registers the handle with
``defer``, and this thread takes what is buffered when that time is up (waking for it, or on its
next batch) and queues it like any change. It takes it under the condition, so a job's final status,
which takes the rest under the handle's lock then queues, can never be queued before it.

A thread already inside a transaction (tests, the admin, a caller recording in its own atomic
block) records inline instead, so the record commits or rolls back with that transaction; so does
every thread when ``TRACKING["BATCH_WRITES"]`` is False.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

try:
    import fcntl
except ImportError:  # not POSIX: SQLite's busy handler alone
    fcntl = None  # type: ignore[assignment]

from django.db import DatabaseError, connection

from jobsapp import hold_ack

from . import launching
from .conf import tracking_settings
from .transitions import Change

logger = logging.getLogger("tracking.writer")

#: A connection unused this long is closed (a worker idle for hours holds no database connection).
IDLE_CLOSE_SECONDS = 5.0
#: The longest a batch waits for the threads the previous one released (see Writer._gather):
#: about a no-op job's turnaround (ack, fetch, run) on a busy machine. SQLite's shorter.
GATHER_SECONDS = 0.003
SQLITE_GATHER_SECONDS = 0.001
#: Attempts at one batch before its changes are applied one by one.
BATCH_ATTEMPTS = 3


@dataclass(slots=True)
class Ticket:
    change: Change
    #: Held until the change is committed (the waiting thread blocks acquiring it); None when
    #: nobody waits.
    done: threading.Lock | None = None
    result: bool | None = None
    error: BaseException | None = field(default=None)


class Writer:
    """Applies submitted changes in batches from one thread; shared by all threads of a process.
    Its lifecycle is the engine components': ``start()``, ``quiet()``, ``stop(deadline)``."""

    #: The longest stop() waits for the thread to write what is queued.
    join_seconds = 10.0

    def __init__(self, *, shard: int | None = None) -> None:
        shards = max(2, int(tracking_settings.COUNTER_SHARDS))
        self.pid = os.getpid()
        self.shard = shard if shard is not None else 1 + self.pid % (shards - 1)
        self._condition = threading.Condition()
        self._pending: deque[Ticket] = deque()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._lock_file: int | None = None  # the turn lock's descriptor (-1: none could be opened)
        self._waiting = 0  # queued changes whose thread waits for the commit
        self._released = 0  # how many of those the last batch released
        # While the writer sleeps: wake it for any change (0), or once this many waited-for
        # changes are queued (gathering); None while it works. Saves a wake-up per change.
        self._wake_at: int | None = None
        # (monotonic time due, what takes a handle's buffered messages as a change) (see defer)
        self._deferred: list[tuple[float, Callable[[], Change | None]]] = []
        self.batches = 0
        self.changes = 0

    def start(self) -> None:
        with self._condition:
            if self._thread is None:
                self._stopping = False
                self._thread = threading.Thread(target=self._run, name="tracking.writer", daemon=True)
                self._thread.start()

    def submit_held(self, change: Change) -> bool:
        """Queue ``change`` with the job's acknowledgement held until it is committed
        (``jobsapp.hold_ack``: the worker's acker waits for it, not this thread); False, with
        nothing queued, when this thread cannot hold its job's ack."""
        done = threading.Lock()
        done.acquire()
        ticket = Ticket(change, done)

        def release(timeout_seconds: float) -> bool:
            return done.acquire(timeout=timeout_seconds)

        if not hold_ack(release):
            return False
        self._queue(ticket)
        return True

    def submit(self, change: Change, *, wait: bool) -> bool | None:
        """Queue ``change``. With ``wait``, block until it is committed and return whether it
        changed its event (raising the database error if it could not be written)."""
        done = None
        if wait:
            done = threading.Lock()
            done.acquire()
        ticket = Ticket(change, done)
        self._queue(ticket)
        if done is None:
            return None
        if not done.acquire(timeout=tracking_settings.BATCH_WAIT_SECONDS):
            raise DatabaseError(f"tracking: change {change.transition.name} of {change.job_id} not written in time")
        if ticket.error is not None:
            raise ticket.error
        return ticket.result

    def _queue(self, ticket: Ticket) -> None:
        done = ticket.done
        with self._condition:
            if self._thread is None:
                self.start()
            self._pending.append(ticket)
            self._waiting += done is not None
            if self._wake_at is not None and self._waiting >= self._wake_at:
                self._condition.notify()

    def defer(self, delay_seconds: float, take: Callable[[], Change | None]) -> None:
        """Call ``take`` on this thread in ``delay_seconds`` (sooner when stopping) and queue the
        change it returns (None: nothing left to write). Buffered progress messages use it, so the
        last one before a long step is written while the step runs, not after it."""
        with self._condition:
            if self._thread is None:
                self.start()
            self._deferred.append((time.monotonic() + delay_seconds, take))
            if self._wake_at is not None:
                self._condition.notify()  # sleeping: wait again until this one is due

    def _take_deferred(self) -> float:
        """Queue the deferred changes that are due (all of them when stopping); seconds until the
        next one is due. Called with the condition held."""
        now = time.monotonic()
        due = [entry for entry in self._deferred if entry[0] <= now or self._stopping]
        if due:
            self._deferred = [entry for entry in self._deferred if not (entry[0] <= now or self._stopping)]
            for _, take in due:
                change = take()
                if change is not None:
                    self._pending.append(Ticket(change))
        return min((entry[0] for entry in self._deferred), default=now + IDLE_CLOSE_SECONDS) - now

    def quiet(self) -> None:
        """Nothing to quiet: submissions are accepted until ``stop``."""

    def stop(self, deadline: float | None = None) -> None:
        """Write what is queued, then end the thread: the engine's ``stop(deadline)``
        (``jobsapp.component``). Joins the thread until ``deadline`` (a ``time.monotonic()``
        time), at most ``join_seconds``; a thread still writing then is a daemon that finishes its
        batch on its own or dies with the process (its waited-for changes were not acknowledged)."""
        with self._condition:
            thread, self._stopping = self._thread, True
            self._condition.notify()
        if thread is not None:
            timeout = self.join_seconds
            if deadline is not None:
                timeout = max(0.0, min(timeout, deadline - time.monotonic()))
            thread.join(timeout)
        with self._condition:
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._condition:
                next_due = self._take_deferred()
                if not self._pending and not self._stopping:
                    self._wake_at = 0
                    self._condition.wait(min(IDLE_CLOSE_SECONDS, max(next_due, 0.0)))
                    self._wake_at = None
                    self._take_deferred()
                self._gather()
                if self._pending:
                    size = min(len(self._pending), tracking_settings.BATCH_MAX_CHANGES)
                    batch = [self._pending.popleft() for _ in range(size)]
                    waited = sum(ticket.done is not None for ticket in batch)
                    self._waiting -= waited
                    self._released = waited
                elif self._stopping:
                    break
                elif self._deferred:
                    continue  # woken for a deferred change not due yet: not idle
                else:
                    batch = []
            if batch:
                self._write(batch)
            else:
                connection.close()  # idle: give the connection back (a no-op when closed already)
        connection.close()

    def _gather(self) -> None:
        """Give the threads the last batch released a moment to queue their next waited-for
        change (called with the condition held; at most ``GATHER_SECONDS``).

        On PostgreSQL it waits for those and the ones already waiting, so all of a process's
        threads share one transaction instead of two groups alternating in half-size batches:
        fewer, bigger transactions, less work per job in the worker and in the database. On
        SQLite, where the processes' writers take turns on one lock and a batch costs little, it
        waits only for as many as the last batch released (measured: gathering all of them
        there was slower, bench/tracking_overhead.py).
        """
        sqlite = connection.vendor == "sqlite"
        target = self._released if sqlite else self._waiting + self._released
        deadline = time.monotonic() + (SQLITE_GATHER_SECONDS if sqlite else GATHER_SECONDS)
        self._wake_at = target
        try:
            while self._pending and not self._stopping and self._waiting < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._condition.wait(remaining)
        finally:
            self._wake_at = None

    def _write(self, batch: list[Ticket]) -> None:
        changes = [ticket.change for ticket in batch]
        error: BaseException | None = None
        for attempt in range(BATCH_ATTEMPTS):
            try:
                with self._database_turn():
                    results = launching.apply(changes, shard=self.shard)
            except DatabaseError as exc:  # rolled back as a whole; the jobs go on either way
                error = exc
                logger.warning("tracking: batch of %d changes failed (attempt %d): %s", len(batch), attempt + 1, exc)
                connection.close()
                time.sleep(0.05 * 2**attempt)
                continue
            self._finish(batch, results, None)
            return
        if len(batch) == 1:
            logger.error("tracking: could not record %s of job %s: %s", changes[0].transition.name, changes[0].job_id, error)
            self._finish(batch, [None], error)
            return
        for ticket in batch:  # isolate the change that fails the batch
            self._write([ticket])

    @contextlib.contextmanager
    def _database_turn(self) -> Iterator[None]:
        """On a SQLite file, take turns with the other processes' writers on an OS file lock
        (``turn_lock_path``: in the temporary directory, not beside the database).

        SQLite's own lock is polled: a writer that finds it taken sleeps in the busy handler
        (1, 2, 5, 10... ms) while the holder commits and takes it again, so two busy processes
        starve each other. A blocking ``flock`` wakes the next writer as soon as the lock is
        released. Other writers (enqueue, the web) still use SQLite's lock alone, as before.
        """
        if connection.vendor != "sqlite" or fcntl is None:
            yield
            return
        if self._lock_file is None:
            name = str(connection.settings_dict["NAME"])
            if name == ":memory:" or "mode=memory" in name:
                yield
                return
            self._lock_file = _open_turn_lock(turn_lock_path(name))  # kept open: the lock's handle
        if self._lock_file < 0:  # no lock file could be opened: SQLite's own lock alone
            yield
            return
        fcntl.flock(self._lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)

    def _finish(self, batch: list[Ticket], results: list[bool] | list[None], error: BaseException | None) -> None:
        self.batches += 1
        self.changes += len(batch)
        for ticket, result in zip(batch, results, strict=True):
            ticket.result, ticket.error = result, error
            if ticket.done is not None:
                ticket.done.release()


def turn_lock_path(database_name: str) -> str:
    """The file on which the writers of one SQLite database take turns: in the temporary directory
    (``tempfile.gettempdir()``, so ``$TMPDIR``), named by a hash of the database's real path, so
    every process using that database finds the same one and none appears beside the database
    (a checkout, a user's project). It holds nothing; deleting it while no worker runs is safe."""
    digest = hashlib.sha256(os.path.realpath(database_name).encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f"jobsapp-tracking-{digest}.lock")


def _open_turn_lock(path: str) -> int:
    """A read-only descriptor of the turn lock (``flock`` needs no more, and another user's file
    opens read-only), created when missing; -1 when it cannot be opened (logged once)."""
    for flags in (os.O_RDONLY | os.O_CREAT, os.O_RDONLY):
        try:
            return os.open(path, flags, 0o666)
        except OSError as error:  # e.g. another user's file in a sticky /tmp: try without O_CREAT
            failure = error
    logger.warning("tracking: no turn lock for the SQLite writers at %s (%s): SQLite's own lock alone", path, failure)
    return -1


_writer: Writer | None = None
_writer_lock = threading.Lock()


def get_writer() -> Writer:
    """This process's writer (a new one in a forked child: threads do not survive a fork)."""
    global _writer
    writer = _writer
    if writer is None:
        with _writer_lock:
            if _writer is None or _writer.pid != os.getpid():
                _writer = Writer()
            writer = _writer
    return writer


def _forget_writer_in_child() -> None:
    """After a fork, in the child: the parent's writer (and its thread, which did not survive)
    is not this process's. Cheaper than comparing ``os.getpid()`` (a system call) on every record."""
    global _writer, _writer_lock
    _writer, _writer_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):  # no fork, no child to worry about
    os.register_at_fork(after_in_child=_forget_writer_in_child)


def stop_writer(deadline: float | None = None) -> None:
    """Write what is queued and end this process's writer thread, waiting until ``deadline``
    (``time.monotonic()``; at most ``Writer.join_seconds``): at a worker's shutdown, at exit,
    between tests."""
    global _writer
    with _writer_lock:
        writer, _writer = _writer, None
    if writer is not None and writer.pid == os.getpid():
        writer.stop(deadline)


#: The longest the interpreter's exit waits for the writer.
EXIT_STOP_SECONDS = 5.0


def _stop_writer_at_exit() -> None:
    stop_writer(time.monotonic() + EXIT_STOP_SECONDS)


atexit.register(_stop_writer_at_exit)


def records_inline() -> bool:
    """Whether ``record_change`` writes in the calling thread: inside a transaction, or with
    batching off."""
    return not tracking_settings.BATCH_WRITES or connection.in_atomic_block


def record_change_held(change: Change, *, inline: bool | None = None) -> bool:
    """Record ``change`` through this process's writer with the job's acknowledgement held until
    it is committed (a worker's processor thread: ``jobsapp.hold_ack``), without waiting here;
    False, with nothing recorded, where that cannot be done (recording inline, or a thread that
    does not hold acks): the caller records it with ``record_change(..., wait=True)``.
    ``inline``: what ``records_inline()`` answered for this thread already (None: ask it)."""
    if records_inline() if inline is None else inline:
        return False
    return get_writer().submit_held(change)


def record_change(change: Change, *, wait: bool, inline: bool | None = None) -> bool | None:
    """Record ``change`` through this process's writer, or inline when the caller is inside a
    transaction (or batching is off). Returns whether the event changed; None when not waited for.
    ``inline``: what ``records_inline()`` answered for this thread already (None: ask it)."""
    if records_inline() if inline is None else inline:
        return launching.apply([change])[0]
    return get_writer().submit(change, wait=wait)
