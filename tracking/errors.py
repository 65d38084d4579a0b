"""The tracking layer's exceptions. Each one's docstring is its contract."""

from __future__ import annotations

from jobsapp import NoRetryError


class BusinessFailure(NoRetryError):
    """Raise from a tracked job's ``perform`` when the work cannot be done for a business reason
    ("seller not qualified"). The job's event records ``failed`` with this message; the engine
    counts the job as failed and neither retries it nor sends it to the dead set."""


#: The name the AsyncTask documents use for a business failure.
NormalException = BusinessFailure
