"""The registry of job classes: wire name -> class. The only way a payload becomes code.

Filled when a ``Job`` subclass is defined (and again when ``sidekiq_options`` renames it), which
happens when Django autodiscovers ``jobs.py`` in every installed app. A worker looks the payload's
``class`` up here and nowhere else: nothing is ever imported because a payload named it, so a
hostile ``"os.system"`` is just an unknown name.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .errors import DuplicateJobName, UnknownJobClass

if TYPE_CHECKING:
    from .job import Job

_lock = threading.Lock()
_by_name: dict[str, type[Job]] = {}


def register(job_class: type[Job], name: str, *, previous_name: str | None = None) -> None:
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


def lookup(name: object) -> type[Job]:
    """The registered class for a wire name; UnknownJobClass for anything else."""
    job_class = _by_name.get(name) if isinstance(name, str) else None
    if job_class is None:
        shown = repr(name)[:200]
        raise UnknownJobClass(f"{shown} is not a registered job class; nothing was imported or run")
    return job_class


def is_registered(name: str) -> bool:
    return name in _by_name


def names() -> list[str]:
    return sorted(_by_name)
