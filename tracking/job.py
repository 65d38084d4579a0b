"""``TrackedJob``: a job base class that opts into task tracking and can report progress.

Equivalent to ``@sidekiq_options(use_task_event=True)`` on a plain ``Job``, plus two methods
that write to the job's event through the handle the tracking server middleware sets on the
instance (``self.task_event``). Run without that middleware (an inline test mode), they do nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from jobsapp import Job

if TYPE_CHECKING:
    from .progress import EventHandle


class TrackedJob(Job):
    """Base class of tracked jobs: ``self.add_message("...")`` and ``self.report_progress(n, total)``."""

    abstract = True
    sidekiq_options_hash: ClassVar[dict] = {**Job.sidekiq_options_hash, "use_task_event": True}

    task_event: EventHandle | None = None

    def add_message(self, message: str) -> None:
        """Append a message to this job's event (batched; see ``tracking.progress``)."""
        if self.task_event is not None:
            self.task_event.add_message(message)

    def report_progress(self, done: int, total: int, *, unit: str = "item") -> None:
        """Append "item 3,412 of 10,000" style progress; while the job runs, ``done / total`` of it
        counts toward its task's progress bar."""
        if self.task_event is not None:
            self.task_event.next_message_reports(done, total)
        self.add_message(f"{unit} {done:,} of {total:,}")
