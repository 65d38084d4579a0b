"""tracking: tasks of many jobs, each job's life as an event, and an API and page to follow them.

The public API. Models are in ``tracking.models`` (``Task.objects.launch``); the engine
middleware in ``tracking.middleware``.
"""

from .errors import BusinessFailure, NormalException
from .job import TrackedJob

__all__ = ["BusinessFailure", "NormalException", "TrackedJob"]
