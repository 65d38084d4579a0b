"""The registry of job classes: wire name -> class. The only way a payload becomes code.

Filled when a ``Job`` subclass is defined (and again when ``sidekiq_options`` renames it), which
happens when Django autodiscovers ``jobs.py`` in every installed app. A worker looks the payload's
``class`` up here and nowhere else: nothing is ever imported because a payload named it, so a
hostile ``"os.system"`` is just an unknown name.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from .conf import jobs_settings
from .errors import DuplicateJobName, UnknownJobClass
from .payload import Item


class JobClass(Protocol):
    """What the registry, the client, batches and the middleware chains need of a job class: its
    options and its wire name. ``jobsapp.Job`` is one; it is defined above these modules, since
    defining a subclass registers it and its ``perform_*`` push through the client."""

    sidekiq_options_hash: ClassVar[dict[str, Any]]

    @classmethod
    def wire_name(cls) -> str:
        """The ``class`` string in payloads."""
        ...


_lock = threading.Lock()
#: Wire name -> the ``jobsapp.Job`` subclass registered under it.
_by_name: dict[str, type[Any]] = {}


def register(job_class: type[JobClass], name: str, *, previous_name: str | None = None) -> None:
    """Register ``job_class`` under ``name``; DuplicateJobName if another class holds it."""
    with _lock:
        if previous_name and previous_name != name and _by_name.get(previous_name) is job_class:
            del _by_name[previous_name]
        existing = _by_name.get(name)
        if existing is not None and existing is not job_class:
            same_definition = (existing.__module__, existing.__qualname__) == (job_class.__module__, job_class.__qualname__)
            if not same_definition:
                raise DuplicateJobName(
                    f"job name {name!r} is taken by {existing.__module__}.{existing.__qualname__}; "
                    f"give {job_class.__module__}.{job_class.__qualname__} another class_name"
                )
        _by_name[name] = job_class


def unregister(name: str) -> None:
    with _lock:
        _by_name.pop(name, None)


def lookup(name: object) -> type[Any]:
    """The registered class for a wire name (a ``jobsapp.Job`` subclass); UnknownJobClass for
    anything else."""
    job_class = _by_name.get(name) if isinstance(name, str) else None
    if job_class is None:
        shown = repr(name)[:200]
        raise UnknownJobClass(f"{shown} is not a registered job class; nothing was imported or run")
    return job_class


def is_registered(name: str) -> bool:
    return name in _by_name


def names() -> list[str]:
    return sorted(_by_name)


def is_registered_class(candidate: object) -> bool:
    """Whether ``candidate`` is a job class registered under its own wire name (a concrete
    ``Job`` subclass: abstract bases are not registered)."""
    wire_name = getattr(candidate, "wire_name", None)
    return isinstance(candidate, type) and callable(wire_name) and _by_name.get(wire_name()) is candidate


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """What every push of one job class carries besides its arguments (what ``Job.set`` starts from)."""

    wire_name: str
    #: The registered class (a ``jobsapp.Job`` subclass, as ``lookup`` returns it); None for a name
    #: this process does not know (a Ruby worker's class, a renamed one): such a job is pushed by
    #: name, with no options.
    job_class: type[Any] | None
    #: The class's options as they ride in each payload (without ``class_name`` and ``on_commit``).
    options: Item
    #: The class's queue, else ``JOBSAPP["DEFAULT_QUEUE"]`` as it is set now.
    queue: str


def job_template(job: type[JobClass] | str) -> JobTemplate:
    """The wire name, options and queue of a job class, or of a wire name (looked up among the
    registered classes; nothing is imported). Read at each call, so settings changes apply."""
    job_class = job if not isinstance(job, str) else lookup(job) if is_registered(job) else None
    wire_name = job if isinstance(job, str) else job.wire_name()
    options: Item = {}
    if job_class is not None:
        options = {key: value for key, value in job_class.sidekiq_options_hash.items() if key not in ("class_name", "on_commit")}
    return JobTemplate(wire_name, job_class, options, str(options.get("queue") or jobs_settings.DEFAULT_QUEUE))
