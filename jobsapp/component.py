"""The lifecycle shared by the engine's background threads (heartbeat, scheduler, sweeper).

A component owns one daemon thread named ``jobsapp.<name>`` that runs ``_run`` until ``stop()``;
``_run`` waits with ``self._stop.wait(seconds)`` so a stop wakes it at once. ``stop`` joins the
thread for a bounded time: a thread stuck on a Redis call must not hold up a shutdown (it is a
daemon and dies with the process). Start and shutdown order is the launcher's (launcher.py).
"""

from __future__ import annotations

import threading


class Component:
    #: The thread's name, after "jobsapp.".
    thread_name = "component"
    #: How long stop() waits for the thread.
    join_seconds = 5.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"jobsapp.{self.thread_name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.join_seconds)

    def _run(self) -> None:
        raise NotImplementedError
