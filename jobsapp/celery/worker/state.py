"""``celery.worker.state``: the in-memory bookkeeping of a Celery worker, which lives in the worker
process. ``runworkers`` is another process, so its sets cannot be read here: every access raises
``NotImplementedError`` saying so. Read a task's outcome with ``AsyncResult(id).state`` and what
runs with ``app.control.inspect().active()``."""

from __future__ import annotations

from typing import Any, NoReturn


class WorkerProcessState:
    """One of the worker's sets (``successful_requests``, ``revoked``...): not readable from here."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"celery.worker.state.{self.name} is the worker process's own memory; runworkers is another process: "
            "read AsyncResult(task_id).state or app.control.inspect() instead"
        )

    __contains__ = __iter__ = __len__ = __bool__ = clear = add = discard = _refuse


successful_requests = WorkerProcessState("successful_requests")
active_requests = WorkerProcessState("active_requests")
reserved_requests = WorkerProcessState("reserved_requests")
requests = WorkerProcessState("requests")
revoked = WorkerProcessState("revoked")
revoked_stamps = WorkerProcessState("revoked_stamps")
