"""The tracking layer's exceptions. Each one's docstring is its contract."""

from __future__ import annotations

from jobsapp import NoRetryError


class BusinessFailure(NoRetryError):
    """Raise from a tracked job's ``perform`` when the work cannot be done for a business reason
    ("seller not qualified"). The job's event records ``failed`` with this message; the engine
    counts the job as failed and neither retries it nor sends it to the dead set."""


#: The name the AsyncTask documents use for a business failure.
NormalException = BusinessFailure


class TaskCancelled(Exception):
    """The task was cancelled (``tracking.launching.cancel``): no job may join it any more. Raised
    by ``Task.objects.add_jobs``, by a push of a job naming the task (``task_id``), and by
    retrying its errored jobs; nothing was written or pushed."""
