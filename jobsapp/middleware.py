"""Client and server middleware: the base classes of no-op hooks that users subclass.

Client middleware runs in the pushing thread, once per job, before anything is written to Redis:
``call`` returns the (possibly changed) item to go on, or None to stop the push silently.

Server middleware runs in a processor thread around ``perform``: ``call`` wraps the job (it sees
its exceptions and may re-raise or swallow them); ``on_retry``, ``on_dead`` and ``on_requeue`` are
told what the engine decided after the chain has finished, so a middleware can record "waiting
for retry (2 of 25)" without re-deriving the retry policy. They are called by the "job ended"
door alone (``jobsapp.ending``: ``finish`` and ``put_back``), wherever the job ended: in a
worker, or in the web process or command where an operator deleted, killed or moved it
(``jobsapp.api``). ``on_startup`` comes first, once the worker process (each ``-P`` child) has
started its threads and takes jobs (``tell_startup``); ``on_shutdown`` comes last, when the worker process is about to exit (``-P``
children leave with ``os._exit``: no atexit runs; ``tell_shutdown``). A hook that raises is
logged and ignored: middleware never decides where a job ends up.

The ordered chains that run them live in ``jobsapp.chains``, below the producing side (every push
runs the client chain), and are named here too: ``jobsapp.middleware.server_chain().add(Timing)``.
Chains are configured from ``JOBSAPP["CLIENT_MIDDLEWARE"]`` / ``["SERVER_MIDDLEWARE"]`` (dotted
paths) and changed in code like Sidekiq's: add, remove, prepend, insert_before, insert_after.
Instances are built once per chain and shared by every thread, so a middleware keeps no per-job
state on ``self``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .chains import (
    Chain,
    call_death_handlers,
    client_chain,
    notify,
    reset_chains,
    run_client_chain,
    run_server_chain,
    server_chain,
    tell_shutdown,
    tell_startup,
)
from .payload import Item

if TYPE_CHECKING:
    import redis

    from .job import Job

__all__ = [
    "Chain",
    "ClientMiddleware",
    "ServerMiddleware",
    "call_death_handlers",
    "client_chain",
    "notify",
    "reset_chains",
    "run_client_chain",
    "run_server_chain",
    "server_chain",
    "tell_shutdown",
    "tell_startup",
]


class ClientMiddleware:
    """Base of client middleware. Override ``call`` (and ``wants`` when it ignores most jobs)."""

    def wants(self, job_class: type[Job] | None, options: Item) -> bool:
        """Whether ``call`` needs to see jobs with these options (a bulk push's shared options).

        Returning False for a bulk push lets it skip the per-job chain and take the fast path
        that encodes the shared fields once.
        """
        return True

    def call(self, job_class: type[Job] | None, item: Item, queue: str, redis: redis.Redis) -> Item | None:
        """Return the item to push it (changed or not), or None to stop the push."""
        return item


class ServerMiddleware:
    """Base of server middleware. Override ``call`` to wrap jobs, and any hook you need."""

    def call(self, job: Job, item: Item, queue: str, call_next: Callable[[], Any]) -> Any:
        """Run the rest of the chain and the job by calling ``call_next()``; return its result."""
        return call_next()

    def on_retry(
        self,
        job_class: type[Job] | None,
        item: Item,
        exception: BaseException,
        *,
        retry_count: int,
        retry_limit: int,
        run_at: float,
    ) -> None:
        """The job failed and will run again at ``run_at`` (attempt ``retry_count + 1`` of ``retry_limit``)."""

    def on_dead(self, job_class: type[Job] | None, item: Item, exception: BaseException | None, *, reason: str) -> None:
        """The job will not run again: it went to the dead set, was discarded (``retry: false``),
        expired, or was revoked, deleted or killed while it waited. ``reason`` is a
        ``jobsapp.outcomes.DeadReason`` (a str: ``"retries_exhausted"``, ``"killed"``, ``"deleted"``...)."""

    def on_requeue(self, item: Item, *, reason: str) -> None:
        """The job was put back on its queue unfinished (shutdown, recovery) or sent there by an
        operator, to run again. ``reason`` is a ``jobsapp.outcomes.RequeueReason`` (a str:
        ``"shutdown"``, ``"recovered"``, ``"operator"``...)."""

    def on_startup(self) -> None:
        """The worker process has started its threads and takes jobs from now on (each ``-P``
        child once): warm up what every job will need."""

    def on_shutdown(self) -> None:
        """The worker process is about to exit: no job runs any more; flush what you buffer."""
