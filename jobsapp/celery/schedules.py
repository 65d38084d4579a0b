"""Celery's ``schedule`` and ``crontab`` for ``app.conf.beat_schedule``, run by the engine's
periodic scheduler (``jobsapp.periodic``) instead of a ``celery beat`` process.

    app.conf.beat_schedule = {
        "add-every-30-seconds": {"task": "tasks.add", "schedule": 30.0, "args": (16, 16)},
        "monday-morning": {"task": "tasks.report", "schedule": crontab(hour=7, minute=30, day_of_week=1)},
    }

Each entry becomes a periodic job (``JOBSAPP["PERIODIC"]``'s format) named by its key, checked
when the workers start (and by ``manage.py check``) with the other periodic jobs. Every worker
process ticks them and each tick is pushed once, however many workers run (the periodic
scheduler's claim). What a beat entry can say and a periodic job cannot (``relative``, ``solar``,
fractions of a second, options other than ``queue``) is refused here, at declaration.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .. import periodic


class schedule:
    """Every ``run_every`` (seconds, or a timedelta): a whole number of seconds, at least one."""

    def __init__(self, run_every: float | dt.timedelta | None = None, relative: bool = False, nowfun: Any = None, app: Any = None) -> None:
        if relative:
            raise ImproperlyConfigured("schedule(relative=True) is not supported: periodic ticks are aligned on the epoch")
        if nowfun is not None:
            raise ImproperlyConfigured("schedule(nowfun=...) is not supported: ticks follow the Redis server's clock")
        seconds = run_every.total_seconds() if isinstance(run_every, dt.timedelta) else run_every
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 1 or not float(seconds).is_integer():
            raise ImproperlyConfigured(f"a schedule runs every whole number of seconds >= 1, not {run_every!r}")
        self.run_every = dt.timedelta(seconds=int(seconds))

    @property
    def seconds(self) -> int:
        return int(self.run_every.total_seconds())

    def periodic_fields(self) -> dict[str, Any]:
        """This schedule as a periodic job's ``every``/``cron`` field."""
        return {"every": self.seconds}

    def __repr__(self) -> str:
        return f"<freq: {self.run_every}>"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.periodic_fields() == self.periodic_fields()

    def __hash__(self) -> int:
        return hash(tuple(self.periodic_fields().items()))


def _field(value: str | int | Iterable[int], name: str) -> str:
    """One crontab field as cron text: ``"*/15"``, ``7``, ``{1, 3, 5}`` or ``"mon-fri"``."""
    if isinstance(value, bool):
        raise ImproperlyConfigured(f"crontab {name}={value!r} is not a cron field")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        text = value.strip()
        if not text or any(character.isspace() for character in text):
            raise ImproperlyConfigured(f"crontab {name}={value!r} is not a cron field")
        return text
    numbers = sorted(value)
    if not numbers or not all(isinstance(number, int) and not isinstance(number, bool) for number in numbers):
        raise ImproperlyConfigured(f"crontab {name}={value!r} is not a cron field")
    return ",".join(str(number) for number in numbers)


class crontab(schedule):
    """Celery's crontab: ``crontab(minute="*/15")``, ``crontab(hour=7, minute=30, day_of_week=1)``,
    ``crontab(0, 0, day_of_month="2-30/2")``; fields as cron's (``day_of_week`` 0 or ``sun`` is
    Sunday), in ``app.conf.timezone`` (UTC by default)."""

    def __init__(
        self,
        minute: str | int | Iterable[int] = "*",
        hour: str | int | Iterable[int] = "*",
        day_of_week: str | int | Iterable[int] = "*",
        day_of_month: str | int | Iterable[int] = "*",
        month_of_year: str | int | Iterable[int] = "*",
        nowfun: Any = None,
        app: Any = None,
    ) -> None:
        if nowfun is not None:
            raise ImproperlyConfigured("crontab(nowfun=...) is not supported: ticks follow the Redis server's clock")
        self.minute = _field(minute, "minute")
        self.hour = _field(hour, "hour")
        self.day_of_week = _field(day_of_week, "day_of_week")
        self.day_of_month = _field(day_of_month, "day_of_month")
        self.month_of_year = _field(month_of_year, "month_of_year")

    @property
    def cron(self) -> str:
        return f"{self.minute} {self.hour} {self.day_of_month} {self.month_of_year} {self.day_of_week}"

    def periodic_fields(self) -> dict[str, Any]:
        return {"cron": self.cron}

    def __repr__(self) -> str:
        return f"<crontab: {self.minute} {self.hour} {self.day_of_week} {self.day_of_month} {self.month_of_year} (m/h/dM/MY/d)>"


#: The keys of a beat entry's ``options`` a periodic job honours.
_ENTRY_OPTIONS = frozenset({"queue"})
_ENTRY_KEYS = frozenset({"task", "schedule", "args", "kwargs", "options", "relative"})


def periodic_spec(name: str, entry: Mapping[str, Any], *, timezone: str | None) -> dict[str, Any]:
    """One ``beat_schedule`` entry as a ``JOBSAPP["PERIODIC"]`` entry; ImproperlyConfigured says
    what cannot be honoured."""
    if not isinstance(entry, Mapping):
        raise ImproperlyConfigured(f"beat_schedule[{name!r}] must be a dict with 'task' and 'schedule'")
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise ImproperlyConfigured(f"beat_schedule[{name!r}]: unknown key(s) {', '.join(unknown)}")
    task_name = entry.get("task")
    if not isinstance(task_name, str) or not task_name:
        raise ImproperlyConfigured(f"beat_schedule[{name!r}]: 'task' must be a task's name")
    when = entry.get("schedule")
    if not isinstance(when, schedule):
        when = schedule(when, relative=bool(entry.get("relative")))
    elif entry.get("relative"):
        raise ImproperlyConfigured(f"beat_schedule[{name!r}]: relative=True is not supported: periodic ticks are aligned on the epoch")
    options = dict(entry.get("options") or {})
    refused = sorted(set(options) - _ENTRY_OPTIONS)
    if refused:
        raise ImproperlyConfigured(
            f"beat_schedule[{name!r}]: option(s) {', '.join(refused)} are not supported for periodic tasks (only 'queue')"
        )
    spec: dict[str, Any] = {
        "class": task_name,
        **when.periodic_fields(),
        "args": list(entry.get("args") or ()),
        "kwargs": dict(entry.get("kwargs") or {}),
        "description": f"Celery beat entry {name!r}",
    }
    if options.get("queue"):
        spec["queue"] = options["queue"]
    if timezone and "cron" in spec:
        spec["timezone"] = timezone
    return spec


def declare_beat_schedule(beat_schedule: Mapping[str, Any], *, timezone: str | None) -> None:
    """Hand every entry to the periodic scheduler (replacing what this schedule declared before)."""
    if not isinstance(beat_schedule, Mapping):
        raise ImproperlyConfigured("beat_schedule must be a dict of name -> {'task': ..., 'schedule': ...}")
    specs = {name: periodic_spec(name, entry, timezone=timezone) for name, entry in beat_schedule.items()}
    periodic.declare(specs, source="beat_schedule")
