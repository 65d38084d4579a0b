"""Where a task comes from: Celery's ``root_id`` and ``parent_id``, and the message properties a
caller gives (``app_id``), carried in the job's payload as one extra key.

``REQUEST_KEY`` (``"celery_request"``) holds ``{"root_id", "parent_id", ...}``; the worker copies
it into ``self.request``. A task pushed while another one runs in this thread (from its body,
or its follow-ups: a chain's next step, a callback, a replacement) has that task as its parent
and shares its root; a task pushed from anywhere else is its own root, with no parent, as in
Celery. ``ChordUnlock`` pushes a chord's callback as the header task that completed the chord.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

#: Payload extra: the request fields the producer decides (root_id, parent_id, properties, ...).
REQUEST_KEY = "celery_request"
#: Message properties Celery code may pass to ``apply_async`` and read in ``self.request.properties``.
PROPERTIES = ("app_id", "correlation_id", "reply_to", "content_type", "content_encoding")

_current = threading.local()


@contextlib.contextmanager
def publishing_from(root_id: str | None, parent_id: str | None, **extra: Any) -> Iterator[None]:
    """Tasks pushed in this thread inside the block have ``parent_id`` as parent and ``root_id`` as root."""
    stack: list[dict[str, Any]] = _current.__dict__.setdefault("stack", [])
    stack.append({"root_id": root_id, "parent_id": parent_id, **extra})
    try:
        yield
    finally:
        stack.pop()


def current() -> dict[str, Any] | None:
    stack: list[dict[str, Any]] = _current.__dict__.setdefault("stack", [])
    return stack[-1] if stack else None


def request_fields(task_id: str | None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``REQUEST_KEY`` value of a task about to be pushed with id ``task_id``."""
    options = options or {}
    parent = current()
    fields: dict[str, Any] = {}
    if parent is not None and parent.get("parent_id"):
        fields["root_id"] = parent.get("root_id") or parent["parent_id"]
        fields["parent_id"] = parent["parent_id"]
    else:
        fields["root_id"] = options.get("root_id") or task_id
        fields["parent_id"] = options.get("parent_id")
    properties = {name: options[name] for name in PROPERTIES if options.get(name) is not None}
    if properties:
        fields["properties"] = properties
    for name in ("replaced_task_nesting", "group_id", "group_index"):
        if options.get(name) is not None:
            fields[name] = options[name]
    return fields


#: The message headers Celery's protocol 2 sets itself (anything else a receiver adds rides as a custom header).
_PROTOCOL_HEADERS = frozenset(
    {
        "lang",
        "task",
        "id",
        "root_id",
        "parent_id",
        "group",
        "group_index",
        "retries",
        "eta",
        "expires",
        "shadow",
        "timelimit",
        "argsrepr",
        "kwargsrepr",
        "origin",
        "ignore_result",
        "replaced_task_nesting",
        "stamped_headers",
        "stamps",
    }
)


def message_headers(
    name: str,
    task_id: str | None,
    request: dict[str, Any],
    *,
    retries: int = 0,
    eta: Any = None,
    expires: Any = None,
    custom: dict[str, Any] | None = None,
    stamps: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The headers of a task message as Celery's ``before_task_publish`` receivers see them
    (``stamped_headers`` and ``stamps``: the task's stamps, as Celery's protocol 2 sends them)."""
    return {
        "lang": "py",
        "task": name,
        "id": task_id,
        "root_id": request.get("root_id"),
        "parent_id": request.get("parent_id"),
        "group": request.get("group_id"),
        "group_index": request.get("group_index"),
        "retries": retries,
        "eta": eta,
        "expires": expires,
        "replaced_task_nesting": request.get("replaced_task_nesting", 0),
        "stamped_headers": list(stamps or {}),
        "stamps": dict(stamps or {}),
        **(custom or {}),
    }


def before_publish(
    name: str,
    task_id: str | None,
    args: Any,
    kwargs: Any,
    *,
    queue: str,
    request: dict[str, Any],
    headers: dict[str, Any] | None,
    eta: Any = None,
    expires: Any = None,
    stamps: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Send ``before_task_publish``; returns the message headers and the custom headers to carry
    (the task's own plus any a receiver added)."""
    from .signals import before_task_publish

    message = message_headers(name, task_id, request, eta=eta, expires=expires, custom=headers, stamps=stamps)
    if before_task_publish.has_listeners(name):
        body = (list(args), dict(kwargs), {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
        before_task_publish.send(
            sender=name, body=body, exchange="", routing_key=queue, headers=message, properties={}, declare=[], retry_policy=None
        )
        custom = {key: value for key, value in message.items() if key not in _PROTOCOL_HEADERS}
        return message, (custom or None)
    return message, headers


def after_publish(name: str, message: dict[str, Any], args: Any, kwargs: Any, *, queue: str) -> None:
    from .signals import after_task_publish

    if after_task_publish.has_listeners(name):
        body = (list(args), dict(kwargs), {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
        after_task_publish.send(sender=name, body=body, exchange="", routing_key=queue, headers=message)
