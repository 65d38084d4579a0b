"""``revoke(task_id)``: remove a task that has not started yet, as Celery's ``app.control.revoke``;
with ``terminate=True``, stop it while it runs too.

Runs in the caller's thread through ``jobsapp.api``: the job is found wherever it waits (its
queue, the schedule set, the retry set) and deleted by its raw bytes (atomic, so a worker that
fetched it first simply runs it), its features hear that it ended (``jobsapp.ending``: its unique
lock released, its batch counting it failed), and its result says REVOKED. A finished one is left
as it is. With ``terminate=True`` a task that is running, or that a worker fetched first, is
cancelled (``jobsapp.api.cancel``): its worker process interrupts it within a second
(``JobCancelled`` raised in its thread, or its coroutine cancelled; a blocking C call finishes
first) and it ends REVOKED, never retried. Celery sends ``signal`` (SIGTERM by default) to the pool
process; here a job is a thread, so every signal cancels the task the same way: a catchable
exception in the task, as SIGTERM's ``SystemExit`` in a Celery prefork child (SIGKILL cannot be
honoured more strongly: the process and its other jobs go on). A signal that does not end a task
in Celery (``SIGUSR1``: a soft time limit) warns once and cancels all the same.

``revoke_by_stamped_headers(headers)``: the stamps are recorded as revoked for the whole fleet
(``jobsapp.celery.stamping``), and every task that carries one ends REVOKED when a worker is
about to run it; with ``terminate=True`` the running ones are cancelled as above.
"""

from __future__ import annotations

import time
from typing import Any

from .. import api, result_writer, results
from ..ending import Fate
from . import current, stamping
from .exceptions import TaskRevokedError
from .options import warn_unsupported
from .signals import task_revoked

REVOKED_ERROR_CLASS = f"{TaskRevokedError.__module__}.{TaskRevokedError.__qualname__}"
DEFAULT_RETAIN_SECONDS = 24 * 3600


def mark_revoked(task_id: str, *, message: str = "revoked") -> None:
    """Record the task as revoked (REVOKED in ``AsyncResult.state``)."""
    record = results.get(task_id)
    retain = record.retain_seconds if record is not None and record.retain_seconds else DEFAULT_RETAIN_SECONDS
    result_writer.write_outcome(
        task_id,
        {"status": results.FAILED, "reason": "revoked", "error_class": REVOKED_ERROR_CLASS, "error_message": message},
        retain_seconds=retain,
    )


#: The signals that end a task in Celery (by name, with or without "SIG", or number).
TERMINATING_SIGNALS = frozenset({"TERM", "KILL", "INT", "QUIT", "15", "9", "2", "3"})


def _check_signal(signal: Any) -> None:
    if signal is None:
        return
    name = str(signal).upper().removeprefix("SIG")
    if name not in TERMINATING_SIGNALS:
        warn_unsupported(f"revoke(terminate=True, signal={signal!r})", "the task is cancelled as with SIGTERM")


def revoke(task_id: str | list[str], *, terminate: bool = False, signal: Any = None, **options: Any) -> int:
    """Delete the waiting jobs with these ids; with ``terminate``, cancel the running ones too
    (see the module header). Returns how many were removed or cancelled. A task that is done is
    not changed. An id no job has yet (and no state) is recorded REVOKED, as Celery's workers
    record the ids they are told to revoke."""
    if terminate:
        _check_signal(signal)
    removed = 0
    for each in [task_id] if isinstance(task_id, str) else list(task_id):
        location = api.find_job(each)
        if terminate and (location is None or location.kind == "running"):
            # running, or taken by a worker before its heartbeat showed it: cancelled there
            # its end is recorded by the door (reason "cancelled": REVOKED), or it finished first
            if api.cancel(each).outcome in (api.CancelOutcome.CANCELLED, api.CancelOutcome.CANCELLING):
                removed += 1
            continue
        if location is None:
            if results.get(each) is None:  # unknown yet: its result says REVOKED
                mark_revoked(each)
            continue
        if location.kind in ("running", "dead"):
            continue
        # the delete tells the "job ended" door: its unique lock, batch, middleware...
        if location.kind == "queue":
            deleted = api.Queue(location.name).delete(location.record, fate=Fate.REVOKED)
        elif location.job_set is not None:
            deleted = location.job_set.delete(location.record, fate=Fate.REVOKED)  # type: ignore[arg-type]
        else:
            deleted = False
        if deleted:
            removed += 1
            mark_revoked(each)
            _announce_revoked(each, location.record.item)
    return removed


def revoke_by_stamped_headers(headers: dict[str, Any] | list[str], *, terminate: bool = False, signal: Any = None) -> str:
    """Flag the stamps ``headers`` names (header -> a value or a list of them; Celery's
    ``["header=value", ...]`` too) as revoked for the whole fleet (``stamping``): a task carrying
    one of them ends REVOKED when a worker is about to run it. With ``terminate``, the running
    tasks that carry one are cancelled as ``revoke(terminate=True)`` cancels a task. Returns
    Celery's reply text."""
    if isinstance(headers, list):
        headers = dict(each.split("=", 1) for each in headers)
    stamping.revoke(headers)
    if not terminate:
        return f"headers {headers} flagged as revoked, but not terminated"
    _check_signal(signal)
    terminated: dict[str, list[Any]] = {}
    for task_id, matched in stamping.running_with(headers):
        if api.cancel(task_id).outcome in (api.CancelOutcome.CANCELLED, api.CancelOutcome.CANCELLING):
            for header, values in matched.items():
                terminated.setdefault(header, []).extend(value for value in values if value not in terminated.get(header, []))
    if not terminated:
        return f"headers {headers} were not terminated"
    return f"headers {terminated} revoked"


class RevokedRequest:
    """The request ``task_revoked`` receivers get for a task revoked before it ran."""

    def __init__(self, task_id: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.id = task_id
        self.task = name
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"<Request {self.task}[{self.id}]>"


def _announce_revoked(task_id: str, item: dict[str, Any]) -> None:
    """Celery's ``task_revoked`` signal, sent where the revocation happened (this process)."""
    name = str(item.get("class") or "")
    task = current.tasks.get(name)
    request = RevokedRequest(task_id, name, item.get("args") or [], item.get("kwargs") or {})
    task_revoked.send(sender=task if task is not None else name, request=request, terminated=False, signum=None, expired=False)


def _request(item: dict[str, Any], *, hostname: str, started_at: float | None = None) -> dict[str, Any]:
    """A task as Celery's inspect replies describe it (``id``, ``name``, ``args``, ``kwargs``, ...)."""
    return {
        "id": item.get("jid"),
        "name": item.get("class"),
        "args": item.get("args") or [],
        "kwargs": item.get("kwargs") or {},
        "type": item.get("class"),
        "hostname": hostname,
        "time_start": started_at,
        "acknowledged": started_at is not None,
        "delivery_info": {"exchange": "", "routing_key": item.get("queue"), "priority": None, "redelivered": False},
        "worker_pid": None,
    }


class Inspect:
    """``app.control.inspect()``: what the worker processes do, read from the process registry
    (the ``processes`` set and each process's heartbeat, refreshed every few seconds) instead of
    a broadcast. Replies are keyed by process identity (``hostname:pid:tag``), as Celery keys them
    by node name; ``destination`` limits them to those identities. ``timeout`` is accepted: nothing
    is awaited. A reply with no live process is None, as Celery's with no node answering."""

    def __init__(
        self, destination: list[str] | None = None, timeout: float = 1.0, callback: Any = None, connection: Any = None, **options: Any
    ) -> None:
        self.destination = destination
        self.timeout = timeout

    def _processes(self) -> list[Any]:
        processes = api.ProcessSet.all()
        if self.destination:
            processes = [each for each in processes if each.identity in self.destination]
        return processes

    def _reply(self, answer: Any) -> dict[str, Any] | None:
        replies = {process.identity: answer(process) for process in self._processes()}
        return replies or None

    def ping(self) -> dict[str, Any] | None:
        return self._reply(lambda process: {"ok": "pong"})

    def active(self, safe: bool | None = None) -> dict[str, Any] | None:
        """The tasks each process is running now."""
        running: dict[str, list[dict[str, Any]]] = {}
        for work in api.WorkSet.all():
            running.setdefault(work.identity, []).append(_request(work.record.item, hostname=work.identity, started_at=work.run_at))
        return self._reply(lambda process: running.get(process.identity, []))

    def scheduled(self, safe: bool | None = None) -> dict[str, Any] | None:
        """Tasks waiting for their ETA (the schedule set), each under the first process that takes its queue."""
        processes = self._processes()
        waiting: dict[str, list[dict[str, Any]]] = {process.identity: [] for process in processes}
        for entry in api.ScheduledSet():
            item = entry.item
            for process in processes:
                if str(item.get("queue") or "default") in process.queues:
                    request = _request(item, hostname=process.identity)
                    waiting[process.identity].append({"eta": entry.score, "priority": None, "request": request})
                    break
        return waiting or None

    def reserved(self, safe: bool | None = None) -> dict[str, Any] | None:
        """Tasks a process has fetched and not started (its look-ahead, Celery's prefetched tasks):
        ``api.ReservedSet``, less those whose result record already says they started or ended
        (the heartbeat that lists running jobs is a few seconds old at most)."""
        waiting: dict[str, list[dict[str, Any]]] = {}
        for reserved in api.ReservedSet.all():
            record = results.get(reserved.record.jid)
            if record is not None and record.status not in (results.QUEUED, results.SCHEDULED, results.RETRYING):
                continue  # started (or done) since the heartbeat
            waiting.setdefault(reserved.identity, []).append(_request(reserved.record.item, hostname=reserved.identity))
        return self._reply(lambda process: waiting.get(process.identity, []))

    def registered(self, *taskinfoitems: Any) -> dict[str, Any] | None:
        """The task names defined (as in this process: every process imports the same ``tasks.py`` modules)."""
        names = sorted(current.tasks)
        return self._reply(lambda process: list(names))

    registered_tasks = registered

    def stats(self) -> dict[str, Any] | None:
        return self._reply(
            lambda process: {
                "pid": process.pid,
                "hostname": process.hostname,
                "pool": {"max-concurrency": process.concurrency, "implementation": "threads"},
                "broker": {"transport": "redis"},
                "uptime": None if process.started_at is None else max(0.0, time.time() - process.started_at),
                "total": {},
                "queues": process.queues,
            }
        )

    def active_queues(self) -> dict[str, Any] | None:
        return self._reply(lambda process: [{"name": queue} for queue in process.queues])

    def query_task(self, *ids: str) -> dict[str, Any] | None:
        """``{id: [state, request]}`` for the given ids that a process runs now ("active")."""
        wanted = {each for group in ids for each in ([group] if isinstance(group, str) else group)}
        found: dict[str, dict[str, Any]] = {}
        for work in api.WorkSet.all():
            if work.record.jid in wanted:
                found.setdefault(work.identity, {})[work.record.jid] = [
                    "active",
                    _request(work.record.item, hostname=work.identity, started_at=work.run_at),
                ]
        return self._reply(lambda process: found.get(process.identity, {}))


class Control:
    """``app.control``: ``inspect()``, ``revoke`` and ``revoke_by_stamped_headers``; the other remote commands need a broadcast
    channel to the workers, which runworkers does not have (``NotImplementedError`` naming it)."""

    def inspect(
        self, destination: list[str] | None = None, timeout: float = 1.0, callback: Any = None, connection: Any = None, **options: Any
    ) -> Inspect:
        return Inspect(destination=destination, timeout=timeout, callback=callback, connection=connection, **options)

    @staticmethod
    def revoke(
        task_id: str | list[str], destination: Any = None, terminate: bool = False, signal: Any = None, reply: bool = False, **options: Any
    ) -> Any:
        """``revoke`` (see the module); with ``reply=True`` a reply per live process, as Celery's workers answer."""
        removed = revoke(task_id, terminate=terminate, signal=signal)
        if not reply:
            return removed
        ids = [task_id] if isinstance(task_id, str) else list(task_id)
        text = f"tasks {', '.join(ids)} flagged as revoked"
        return [{process.identity: {"ok": text}} for process in api.ProcessSet.all()] or [{"jobsapp": {"ok": text}}]

    @staticmethod
    def revoke_by_stamped_headers(
        headers: dict[str, Any] | list[str],
        destination: Any = None,
        terminate: bool = False,
        signal: Any = "SIGTERM",
        reply: bool = False,
        timeout: float | None = None,
        **options: Any,
    ) -> Any:
        """``revoke_by_stamped_headers`` (see the function): the stamps are revoked fleet-wide at
        once (``destination`` cannot narrow them); with ``reply=True`` a reply per live process,
        in Celery's words, else None, as Celery's broadcast without replies."""
        text = revoke_by_stamped_headers(headers, terminate=terminate, signal=signal)
        if not reply:
            return None
        return [{process.identity: {"ok": text}} for process in api.ProcessSet.all()] or [{"jobsapp": {"ok": text}}]

    @staticmethod
    def purge(connection: Any = None) -> int:
        """Discard every task waiting in a queue (Celery's ``purge``): each queue is cleared
        through the operators' API (``jobsapp.api.Queue.clear``); returns how many were dropped.
        Scheduled and retrying tasks are not in a queue yet and stay."""
        return sum(queue.clear() for queue in api.Queue.all())

    def ping(self, destination: list[str] | None = None, timeout: float = 1.0, **options: Any) -> list[dict[str, Any]]:
        return [{identity: reply} for identity, reply in (self.inspect(destination).ping() or {}).items()]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(
                f"app.control.{name}() is a broadcast to Celery workers over the broker; runworkers has none: "
                "see docs/celery.md (inspect() and revoke() are provided)"
            )

        return refuse
