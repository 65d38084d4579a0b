"""Enqueueing inside a database transaction: push after commit, so a job never runs before the
rows it needs exist (django-rq's default; Celery 5.4's ``delay_on_commit``).

``Job.perform_async``, ``perform_in``, ``perform_at`` and ``perform_bulk`` (and their ``set(...)``
forms) ask ``should_defer``: when ``JOBSAPP["ENQUEUE_ON_COMMIT"]`` is True (the default) and the
call runs inside a ``transaction.atomic()`` block of the project's own (the block Django's test
cases wrap every test in does not count), the push is handed to ``transaction.on_commit``. The
jid is chosen before, so the call still returns it; nothing is pushed if the transaction rolls
back. Arguments are checked at once (a non-JSON value raises in the caller, not at commit).
``Job.set(on_commit=False)`` (or ``sidekiq_options(on_commit=False)``) pushes at once anyway.
The raw client (``jobsapp.client.push``) always pushes at once.

With ``JOBSAPP["OUTBOX"]`` on (and its table migrated), a deferred push is also written to the
outbox table in the same transaction (``jobsapp.outbox``): a committed job is then never lost,
whatever happens after the COMMIT. The Celery and ``django.tasks`` surfaces push at once inside a
transaction, as upstream does (Django's conformance suite pins it), unless asked to wait:
Celery's ``delay_on_commit`` (``commit_bound``) and the backend's ``ENQUEUE_ON_COMMIT`` option.

What happens to a deferred job when the push fails at commit: without the outbox, the transaction
has committed by then, so ``RedisUnavailable`` propagates out of the ``atomic`` block (a view
answers 503 through ``RedisUnavailableMiddleware``) and the job is not enqueued. With the outbox,
nothing propagates: the job waits in the outbox and the relay pushes it once Redis answers; a
push failing for another reason is parked there with its reason. A client middleware that stops
the push stops it as it would have at once (the caller already holds a jid that will never run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from . import outbox
from .conf import jobs_settings
from .payload import Item, check_json_native, new_jid

#: The per-call and per-class option (popped from the item: it never rides in the payload).
OPTION = "on_commit"


def in_project_transaction(using: str = DEFAULT_DB_ALIAS) -> bool:
    """True inside an ``atomic()`` block opened by the project (not by a test case's wrapper)."""
    connection = connections[using]
    if not connection.in_atomic_block:  # the common case, asked first: one attribute
        return False
    return any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks)


def should_defer(choice: Any) -> bool:
    """``choice``: the call's or the class's ``on_commit`` option (None: the setting decides).
    Cheap outside a transaction (every push asks): the setting is read only inside one."""
    if not in_project_transaction():
        return False
    if choice is False:
        return _commit_bound.get()
    return bool(jobs_settings.ENQUEUE_ON_COMMIT if choice is None else choice)


_commit_bound: ContextVar[bool] = ContextVar("jobsapp_commit_bound", default=False)


@contextmanager
def commit_bound() -> Iterator[None]:
    """Inside it, every push of this thread inside the project's transaction waits for the commit
    (through the outbox when it is on), even one that asked to go at once: how Celery's
    ``delay_on_commit`` runs ``apply_async`` (which pushes at once, as Celery's)."""
    token = _commit_bound.set(True)
    try:
        yield
    finally:
        _commit_bound.reset(token)


def defer_push(item: Item, push: Callable[[Item], Any]) -> str:
    """Check ``item``'s arguments now, give it a jid, push it when the transaction commits."""
    check_json_native(item.get("args", []), "args")
    check_json_native(item.get("kwargs", {}), "kwargs")
    item["jid"] = item.get("jid") or new_jid()
    if outbox.enabled():
        outbox.defer("push", {"item": item}, jid=str(item["jid"]))
    else:
        transaction.on_commit(partial(push, item))
    return str(item["jid"])


def defer_bulk(item: Item, push_bulk: Callable[[Item], Any], *, batch_size: int = 1000) -> list[str | None]:
    """``defer_push`` for a bulk push: one jid per argument list, chosen now."""
    args_list = item.get("args")
    if type(args_list) is not list or any(type(args) is not list for args in args_list):
        raise TypeError('push_bulk needs "args" as a list of argument lists, e.g. [[1], [2]]')
    for index, args in enumerate(args_list):
        try:
            check_json_native(args, "args")
        except TypeError as exc:
            raise TypeError(f"job {index} of the bulk push: {exc}") from None
    check_json_native(item.get("kwargs", {}), "kwargs")
    jids: list[str | None] = [new_jid() for _ in args_list]
    if outbox.enabled() and jids:
        outbox.defer("push_bulk", {"item": {**item, "jid": jids}, "batch_size": batch_size}, jid=str(jids[0]), jobs=len(jids))
    else:
        transaction.on_commit(partial(push_bulk, {**item, "jid": jids}))
    return jids
