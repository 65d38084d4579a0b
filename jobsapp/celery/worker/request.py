"""``celery.worker.request.Request``: the request ``task_received`` receivers get, shaped as Celery's.

Celery's worker builds one ``Request`` per message it takes and sends it with ``task_received``
before the task runs; receivers read ``request.id``, ``request.task_name``, ``request.stamps``,
``request.replaced_task_nesting``, ``request.errbacks`` or the message's body through the private
``request._Request__payload`` (``(args, kwargs, embed)``, ``embed`` holding the ``callbacks``,
``errbacks``, ``chain`` and ``chord`` as signature dicts). Here it is built from the task's
``self.request`` (``jobsapp.celery.task.Context``), which the engine filled from the job's payload:
the same values, in Celery's names. It is what ``celery.worker.state`` keeps for the tasks a worker
in this process holds (``requests``, ``active_requests``).
"""

from __future__ import annotations

from typing import Any

#: Fields of ``self.request`` that are the engine's own handles, not part of Celery's request.
_ENGINE_FIELDS = frozenset({"item", "task_event", "eager_state", "retain_seconds"})


class Request:
    """One task taken by a worker in this process (Celery's ``Request``, read-only)."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self.id = self.task_id = str(context.id)
        self.name = self.task_name = str(context.task)
        embed = {"callbacks": context.callbacks, "errbacks": context.errbacks, "chain": context.chain, "chord": context.chord}
        self.__payload = (context.args, context.kwargs, embed)

    # the message's identity (``id``, ``task_id``) and the task it names (``name``, ``task_name``)
    @property
    def type(self) -> str:
        return self.name

    @property
    def task(self) -> Any:
        """The task object (Celery's ``request.task``; its name is ``task_name``)."""
        from .. import current

        return current.tasks.get(str(self._context.task))

    # the call
    @property
    def args(self) -> list[Any]:
        return list(self._context.args)

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self._context.kwargs)

    @property
    def _payload(self) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
        return self.__payload

    @property
    def body(self) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
        return self.__payload

    @property
    def callbacks(self) -> list[dict[str, Any]] | None:
        return self._context.callbacks

    @property
    def errbacks(self) -> list[dict[str, Any]] | None:
        return self._context.errbacks

    @property
    def chain(self) -> list[dict[str, Any]] | None:
        return self._context.chain

    @property
    def chord(self) -> dict[str, Any] | None:
        return self._context.chord

    # where it comes from and how it is delivered
    @property
    def root_id(self) -> str | None:
        return self._context.root_id

    @property
    def parent_id(self) -> str | None:
        return self._context.parent_id

    @property
    def group(self) -> str | None:
        return self._context.group

    @property
    def group_index(self) -> int | None:
        return self._context.group_index

    @property
    def replaced_task_nesting(self) -> int:
        return int(self._context.replaced_task_nesting or 0)

    @property
    def stamped_headers(self) -> list[str]:
        return list(getattr(self._context, "stamped_headers", None) or [])

    @property
    def stamps(self) -> dict[str, Any]:
        return dict(getattr(self._context, "stamps", None) or {})

    @property
    def delivery_info(self) -> dict[str, Any]:
        return dict(self._context.delivery_info)

    @property
    def hostname(self) -> str | None:
        return self._context.hostname

    @property
    def eta(self) -> str | None:
        return self._context.eta

    @property
    def expires(self) -> float | None:
        return self._context.expires

    @property
    def reply_to(self) -> str | None:
        return self._context.reply_to

    @property
    def correlation_id(self) -> str | None:
        return self._context.correlation_id

    @property
    def headers(self) -> dict[str, Any] | None:
        return self._context.headers

    @property
    def request_dict(self) -> dict[str, Any]:
        """The request's fields as ``self.request`` has them (Celery's ``request_dict``)."""
        return {key: value for key, value in vars(self._context).items() if key not in _ENGINE_FIELDS}

    def __repr__(self) -> str:
        return f"<Request: {self.task_name}[{self.id}]>"

    __str__ = __repr__
