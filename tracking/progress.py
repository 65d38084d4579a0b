"""The handle a running tracked job reports through: ``self.task_event`` on the job instance.

Built by the tracking server middleware for each run of a tracked job, used only by the
processor thread running it (and any thread the job starts: it is locked). Every record goes
through ``tracking.writer.record_change``: ``working`` and progress messages are handed to the
process's recording thread without waiting, the final status waits for its commit (see
``tracking.writer`` for why). Progress messages are buffered and handed over at most once per
``MESSAGE_FLUSH_INTERVAL_SECONDS``, so a job that reports every row of a chunk costs one write per
second, not one per row. A message is never held longer than that: the first one buffered asks
the recording thread (``Writer.defer``) to take the buffer when the interval is up, so "step 1 of
4" before a long step shows while the step runs. Whatever is left at the end goes out in the same
write as the job's final status. Recording inline (inside a transaction, or ``BATCH_WRITES``
off) there is no recording thread: buffered messages then wait for the next message or the end.
If the worker dies, unwritten messages are lost; the event's status is not.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from .conf import tracking_settings
from .transitions import MESSAGES_ONLY, START, WORKING, Change, MessageEntry, Transition, message_entry
from .writer import get_writer, record_change, record_change_held, records_inline


class EventHandle:
    """Records one run of one tracked job: start, progress messages, and how it ended."""

    def __init__(
        self,
        job_id: str,
        *,
        item: dict[str, Any] | None = None,
        flush_interval_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.job_id = job_id
        self.item = item
        self._flush_interval_seconds = flush_interval_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._buffer: list[MessageEntry] = []
        # (done, total) for the next message, per thread; made on first use (most jobs never report one)
        self._fraction: threading.local | None = None
        self._last_flush = clock()
        # Whether this run records inline (records_inline(), asked once by start: the thread's
        # transaction state is the same when the run ends, and asking costs a connection lookup)
        self._inline: bool | None = None

    @property
    def flush_interval_seconds(self) -> float:
        """``MESSAGE_FLUSH_INTERVAL_SECONDS`` unless given: read only by a job that reports messages."""
        if self._flush_interval_seconds is None:
            self._flush_interval_seconds = float(tracking_settings.MESSAGE_FLUSH_INTERVAL_SECONDS)
        return self._flush_interval_seconds

    def start(self) -> bool | None:
        """Record ``working`` (recording the job's enqueue first if its event is missing: a job
        pushed by Ruby, or before tracking was installed). Not waited for: None, unless recorded
        inline (False when the event is final already: a late duplicate)."""
        self._last_flush = self._clock()
        self._inline = inline = records_inline()
        change = Change(self.job_id, START, timezone.now(), item=self.item)
        return record_change(change, wait=False, inline=inline)

    def add_message(self, message: str) -> None:
        """Append a progress message ("row 3,412 of 10,000"); written in batches."""
        entry = message_entry(WORKING, message)
        fraction = getattr(self._fraction, "value", None)
        if fraction is not None and self._fraction is not None:
            entry["done"], entry["total"] = fraction
            self._fraction.value = None
        with self._lock:
            self._buffer.append(entry)
            first = len(self._buffer) == 1
            waited = self._clock() - self._last_flush
        inline = records_inline()
        if waited >= self.flush_interval_seconds:
            if not (inline and _on_event_loop()):
                # an async job's perform runs on an event loop, where Django refuses a database call:
                # its messages then wait for its end and are written with its final status
                self.flush()
        elif first and not inline:
            # outside the lock: the recording thread takes it (then this one) when the time is up
            get_writer().defer(self.flush_interval_seconds - waited, self._buffered_change)

    def next_message_reports(self, done: int, total: int) -> None:
        """The next ``add_message`` of this thread carries its fraction (``done`` of ``total``),
        which the progress page adds to the bar while the job runs (``report_progress``)."""
        if self._fraction is None:
            with self._lock:
                if self._fraction is None:
                    self._fraction = threading.local()
        self._fraction.value = (int(done), int(total))

    def flush(self) -> None:
        """Hand the buffered messages to the writer now, keeping the status."""
        change = self._buffered_change()
        if change is not None:
            record_change(change, wait=False)

    def _buffered_change(self) -> Change | None:
        """The buffered messages as one change (taking them), None when there are none."""
        entries = self._take()
        return Change(self.job_id, MESSAGES_ONLY, timezone.now(), entries=entries) if entries else None

    def end(self, transition: Transition, message: str | None = None, *, acknowledged: bool = False) -> bool | None:
        """Record how the run ended, with the buffered messages, in one write, committed before
        the engine acknowledges the job: waited for here, or, for an ending the job's ack follows
        (``acknowledged``) in a worker's processor thread, held with that ack (None then)."""
        change = Change(self.job_id, transition, timezone.now(), message=message, entries=self._take())
        if acknowledged and record_change_held(change, inline=self._inline):
            return None
        return record_change(change, wait=True, inline=self._inline)

    def _take(self) -> list[MessageEntry]:
        if not self._buffer:  # most jobs report no message (one appended now races the same with the lock)
            return []
        with self._lock:
            entries, self._buffer = self._buffer, []
            self._last_flush = self._clock()
        return entries


def _on_event_loop() -> bool:
    """Whether this thread is running an event loop (an async job's ``perform`` is)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop running here: a sync job's thread
        return False
    return True
