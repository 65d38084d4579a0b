"""The ``-P N`` parent: forks one child per slot, restarts the dead, forwards signals.

Runs in the main thread of the parent process, which holds no Redis connection and runs no job:
each child is a ``WorkerProcess`` (launcher.py) with its own identity, started by the
``run_child`` callable in the forked process. A child that dies is restarted in the same slot,
so its in-flight list is recovered at once by the new child's slot claim (recovery.py); a slot
that crashes more than 5 times a minute is restarted later (up to 30 s), without holding up the
other slots. TERM/INT stop the children (forwarded) and, after ``timeout_seconds`` + 10 s, kill
those still running; TSTP and TTIN are forwarded.

Those four signals are blocked while a child is forked and entered in ``children``: a stop that
arrives then is handled once the new child is known, so it reaches that child too (a child
restarted just as a deploy stops the fleet must not keep the parent waiting). The child starts
with them blocked and unblocks them once TERM/INT are back to their defaults and TSTP/TTIN
ignored (their default action would suspend the child) until the worker installs its handlers.

The signals the parent does not use (``IGNORED_SIGNALS``: HUP, USR1, USR2) are logged and
ignored, PIPE is ignored: their default action would end the parent and leave its children
taking jobs with no one to restart or stop them (a deploy's ``kill -TERM $(cat pidfile)`` would
find nothing).

Each child holds a ``ParentLink``: the parent's pid and a shared page where the parent writes
that it is quiet. The child's main thread reads both every 0.1 s with its signals (launcher.py):

- quiet is remembered: a child started or restarted after TSTP (one that crashed, or one the
  hard limit stopped) starts quiet and takes no job; so does one that TSTP reached while it was
  still installing its handlers;
- a child whose parent is gone (SIGKILL, the OOM killer) stops as on TERM: quiet, wait up to
  ``-t`` for its running jobs, put the rest back. The child polls ``getppid`` rather than ask the
  kernel for a death signal (Linux's ``PR_SET_PDEATHSIG``): it works on every POSIX system,
  needs no ctypes, cannot miss a parent that died before the child set it up, and its 0.1 s is
  how fast a child hears any signal anyway.
"""

from __future__ import annotations

import gc
import logging
import mmap
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import NoReturn

from django.db import connections

from .. import connection
from ..clock import SYSTEM_CLOCK, Clock

logger = logging.getLogger("jobsapp.supervisor")

#: A slot restarted more often than this in a minute is a crash loop: its next restart waits.
RESTARTS_PER_MINUTE = 5
#: The longest a crash-looping slot waits for its restart.
MAX_RESTART_DELAY_SECONDS = 30.0
#: Extra seconds the children get past their own shutdown timeout before they are killed.
KILL_GRACE_SECONDS = 10.0
#: What the parent handles and forwards; blocked around each fork.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGTSTP, signal.SIGTTIN)
#: Signals no worker process uses: logged and ignored by the parent and by every worker (their
#: default action would end the process).
IGNORED_SIGNALS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


class ParentLink:
    """What a ``-P`` child knows of its parent: its pid, and whether it is quiet (one byte of a
    page shared with every child, written by the parent, read by the children)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._page = mmap.mmap(-1, 1)  # anonymous and shared: forked children see the parent's writes

    def set_quiet(self) -> None:
        """In the parent: TSTP arrived; every child, the ones started later included, is quiet."""
        self._page[0] = 1

    def quiet(self) -> bool:
        return self._page[0] == 1

    def gone(self) -> bool:
        """In a child: whether the parent has died (the child was handed to another process)."""
        return os.getppid() != self.pid


def ignore_unused_signals(on_ignored: Callable[[int], None]) -> None:
    """Install ``on_ignored`` (which must only record the signal: it runs in a signal handler)
    for ``IGNORED_SIGNALS`` and ignore SIGPIPE (a write to a closed socket raises instead)."""
    for signum in IGNORED_SIGNALS:
        signal.signal(signum, lambda received, _frame: on_ignored(received))
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def describe_ignored(signum: int) -> str:
    """The log line for an ignored signal."""
    return f"{signal.Signals(signum).name} ignored: workers use TERM or INT (stop), TSTP (quiet) and TTIN (dump threads)"


class Supervisor:
    """The parent of ``-P N`` children: forks, restarts the dead, forwards signals."""

    def __init__(
        self, *, processes: int, timeout_seconds: float, run_child: Callable[[int, ParentLink], int], clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.processes = processes
        self.clock = clock
        self.timeout_seconds = timeout_seconds
        #: Runs in the forked child with the slot number and the link to this parent; returns the child's exit code.
        self.run_child = run_child
        self.link = ParentLink()
        self._ignored: deque[int] = deque()  # signals received and ignored, logged by the main loop
        self.children: dict[int, int] = {}  # pid -> slot
        #: The stop signal (TERM or INT) received first, and the children it was forwarded to.
        self.stop_signal: int | None = None
        self.told_to_stop: set[int] = set()
        self.restarts: dict[int, list[float]] = {}

    @property
    def stopping(self) -> bool:
        """Whether TERM or INT arrived: no child is started or restarted from then on."""
        return self.stop_signal is not None

    def _spawn(self, slot_number: int) -> None:
        connections.close_all()
        connection.reset()
        # The parent's objects (Django, the engine, the project's jobs) leave the cyclic GC for good:
        # a collection in a child writes to every object it examines, and so would copy the pages
        # it shares with the parent, one by one (Python's gc.freeze advice for pre-fork servers).
        # -P 2 -c 10: the PSS of all three processes 111 -> 71 MB.
        gc.freeze()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
        try:
            if self.stopping:  # a stop arrived since this restart was decided
                return
            pid = os.fork()
            if pid == 0:
                self._become_child(slot_number, blocked)
            self.children[pid] = slot_number
            if self.stop_signal is not None and pid not in self.told_to_stop:
                self._tell(pid, self.stop_signal)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        logger.info("started worker process %d in slot %d", pid, slot_number)

    def _become_child(self, slot_number: int, mask: Iterable[int]) -> NoReturn:
        """The forked child: TERM/INT/CHLD back to their defaults, TSTP/TTIN and the unused
        signals ignored until the worker installs its handlers (TSTP's default action would
        suspend it; a quiet missed meanwhile is read from the link), the parent's signal mask,
        then ``run_child``. Never returns."""
        code = 1
        try:
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            for signum in (signal.SIGTSTP, signal.SIGTTIN, *IGNORED_SIGNALS):
                signal.signal(signum, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            code = self.run_child(slot_number, self.link)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # the child must never return into the parent's code
            logger.exception("worker process in slot %d crashed", slot_number)
            code = 1
        finally:
            logging.shutdown()
            os._exit(code)

    def restart_delay_seconds(self, slot_number: int) -> float:
        """Note that the child in ``slot_number`` died; the seconds to wait before its restart: 0,
        unless the slot died more than ``RESTARTS_PER_MINUTE`` times in the last minute (a crash
        loop: 2, 4, 8 ... up to ``MAX_RESTART_DELAY_SECONDS``)."""
        now = self.clock.monotonic()
        history = [moment for moment in self.restarts.get(slot_number, []) if moment > now - 60]
        history.append(now)
        self.restarts[slot_number] = history
        if len(history) > RESTARTS_PER_MINUTE:
            return min(MAX_RESTART_DELAY_SECONDS, 2.0 ** (len(history) - RESTARTS_PER_MINUTE))
        return 0.0

    def _tell(self, pid: int, signum: int) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return
        if signum == self.stop_signal:
            self.told_to_stop.add(pid)

    def _forward(self, signum: int) -> None:
        for pid in list(self.children):
            self._tell(pid, signum)

    def run(self) -> int:
        def on_stop(signum: int, _frame: object) -> None:
            if self.stop_signal is None:
                self.stop_signal = signum
            self._forward(signum)

        def on_quiet(signum: int, _frame: object) -> None:
            self.link.set_quiet()  # before forwarding: a child forked from now on starts quiet
            self._forward(signum)

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGTSTP, on_quiet)
        signal.signal(signal.SIGTTIN, lambda signum, _frame: self._forward(signum))
        ignore_unused_signals(self._ignored.append)
        for slot_number in range(self.processes):
            if self.stopping:  # TERM/INT while forking: the children not forked yet never start
                break
            self._spawn(slot_number)
        deadline: float | None = None
        delayed: dict[int, float] = {}  # slot -> monotonic time of its postponed restart
        while self.children or (delayed and not self.stopping):
            while self._ignored:
                logger.warning(describe_ignored(self._ignored.popleft()))
            for slot_number, due in list(delayed.items()):
                if self.stopping:
                    delayed.clear()
                elif due <= self.clock.monotonic():
                    del delayed[slot_number]
                    self._spawn(slot_number)
            if self.stopping and deadline is None:
                deadline = self.clock.monotonic() + self.timeout_seconds + KILL_GRACE_SECONDS
            if deadline is not None and self.clock.monotonic() > deadline:
                logger.error("children did not stop in time; killing them")
                self._forward(signal.SIGKILL)
                deadline = self.clock.monotonic() + 5
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:  # no child right now: only postponed restarts are left
                if not delayed:
                    break
                pid, status = 0, 0
            if pid == 0:
                time.sleep(0.1)
                continue
            slot_number = self.children.pop(pid, -1)
            if slot_number < 0:
                continue
            if self.stopping:
                continue
            code = os.waitstatus_to_exitcode(status)
            delay_seconds = self.restart_delay_seconds(slot_number)
            if delay_seconds:  # a crash loop: restart this slot later, without holding up the other slots
                logger.error("worker process %d in slot %d exited (%s); restarting it in %.0f s", pid, slot_number, code, delay_seconds)
                delayed[slot_number] = self.clock.monotonic() + delay_seconds
                continue
            logger.error("worker process %d in slot %d exited (%s); restarting it", pid, slot_number, code)
            self._spawn(slot_number)
        return 0
