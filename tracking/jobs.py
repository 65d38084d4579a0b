"""The tracking layer's own job: ``LaunchChunk``, one chunk of a big task's background launch.

Autodiscovered with every installed app's ``jobs.py``, so every worker of a project with tracking
can run it. ``Task.objects.launch`` pushes one per ``TRACKING["LAUNCH_CHUNK_JOBS"]`` jobs of a task
bigger than ``LAUNCH_INLINE_JOBS``, to the jobs' own queue; see ``tracking.launching`` for what
it writes and why running it twice is harmless.
"""

from __future__ import annotations

from jobsapp import Job

from .launching import launch_chunk


class LaunchChunk(Job):
    """Write the events of one chunk of a task's jobs and push the jobs (``launch_chunk``)."""

    def perform(self, task_id: str, wire_name: str, queue: str, chunk: str) -> None:
        launch_chunk(task_id, wire_name, queue, chunk)
