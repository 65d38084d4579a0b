"""Periodic jobs: ``JOBSAPP["PERIODIC"]`` and ``@periodic_job``, ticked by every worker process.

Thread ``jobsapp.periodic``, one per worker process, started by the launcher only when at least
one periodic job is defined. There is no leader: every process computes the latest tick of each
job from the Redis server's clock and asks ``periodic_claim.lua`` to claim it; the script pushes
the job for exactly one caller per tick (see its header), never before the tick by the server's
clock, so a host whose clock runs ahead cannot run a tick early. Between ticks the thread
sleeps until the soonest next tick (at most ``PERIODIC_POLL_SECONDS``), so ``every: 1`` runs once
a second, not once per process.

After downtime only the latest tick is claimed, so a job whose ticks were missed runs once (not
once per missed tick), or not at all with ``"missed": "skip"``. Ticks were missed when the tick
before the one claimed was never claimed (a later tick became due first: ``every: 5`` with the
workers down for a minute), or when the claimed tick is more than ``MISSED_AFTER_SECONDS`` late
(a daily 09:00 job claimed at 10:00). A job seen for the first time starts from its next tick
(its current one is recorded as done): declaring a daily job at 15:00 does not run today's 09:00.

Each entry is ticked on its own: an entry that raises (a cron no date matches, a ``cron_job:*``
hash another client broke) is logged once and skipped until it recovers, while every other
entry keeps its ticks. A malformed ``jobsapp_last_tick`` (``inf``, ``nan``, far in the future)
is ignored by the claim script, which says so, and replaced by the next claimed tick.

Keys: sidekiq-cron 1.8's layout (keys.CRON_JOBS, ``cron_job:<name>`` and its ``:enqueued`` and
``:jid_history``), with our own fields prefixed ``jobsapp_``. A Ruby app's sidekiq-cron jobs
therefore appear on our dashboard (we never tick them: they have no definition here), and ours
in sidekiq-cron's Web UI. Jobs pushed by a tick carry ``"periodic": "<name>"``; the processor
calls ``record_outcome`` when such a job ends, for the dashboard's "last outcome".

The push is written by the claim script itself, as the scheduler's moves are: client middleware
does not see periodic pushes. A job class declared with a priority (``sidekiq_options(priority=N)``,
``jobsapp.priority``) is pushed with it, to the queue's priority ZSET. If Redis is unreachable the thread logs and backs off; a tick
that passes meanwhile runs once when Redis is back (if it is still the latest).

A pushed job hears its end through the door's table (``jobsapp.ending``'s ``periodic`` row:
``record_outcome``), for the dashboard's last outcome.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from django.core.exceptions import ImproperlyConfigured

from . import expiry, keys, priority, registry, scripts
from .clock import SYSTEM_CLOCK, Clock
from .component import PollingComponent
from .conf import jobs_settings
from .connection import CONNECTION_ERRORS
from .cron import JID_HISTORY_SIZE, RUBY_TIME_FORMAT, next_tick, previous_tick, server_time
from .cron import is_valid as is_valid_cron
from .errors import UnknownJobClass
from .job import Job
from .payload import check_json_native, compact_json, new_jid
from .priority import PRIORITY_KEY

logger = logging.getLogger("jobsapp.periodic")

#: A tick claimed later than this after its time counts as missed (sidekiq-cron uses 60 s too);
#: a tick whose predecessor was never claimed counts as missed however soon it is claimed.
MISSED_AFTER_SECONDS = 60
#: The longest the thread sleeps between two looks at the clock.
PERIODIC_POLL_SECONDS = 5.0
#: The payload key naming the periodic job a pushed job came from.
PERIODIC_KEY = "periodic"

SPEC_KEYS = frozenset({"class", "cron", "every", "args", "kwargs", "queue", "timezone", "missed", "description"})
MISSED_CHOICES = ("run_once", "skip")

#: What one entry can raise without the others being concerned: a cron no date matches
#: (CroniterError is a ValueError), a time out of range, a reply about its own keys (WRONGTYPE,
#: a script error on a hash another client wrote). Redis down, read-only or full is an outage
#: for every entry: the component's backoff handles it.
ENTRY_ERRORS = (ValueError, OverflowError, redis.ResponseError)
OUTAGE_RESPONSES = (redis.exceptions.ReadOnlyError, redis.exceptions.OutOfMemoryError, redis.exceptions.NoScriptError)

_declared: dict[str, dict[str, Any]] = {}
_declared_by: dict[str, set[str]] = {}  # names declared by another source (``declare``)


@dataclass(frozen=True)
class Definition:
    """One periodic job, validated: what to push and when."""

    name: str
    job_class: type[Job]
    cron: str | None = None
    every_seconds: int | None = None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: The definition's own queue; None: the class's, else ``JOBSAPP["DEFAULT_QUEUE"]`` (see ``queue``).
    named_queue: str | None = None
    timezone: str = "UTC"
    missed: str = "run_once"
    description: str = ""

    def previous_tick(self, epoch_seconds: float) -> int:
        """The latest tick at or before ``epoch_seconds`` (epoch seconds)."""
        return previous_tick(epoch_seconds, cron=self.cron, every_seconds=self.every_seconds, timezone=self.timezone)

    def next_tick(self, epoch_seconds: float) -> int:
        """The first tick strictly after ``epoch_seconds``."""
        return next_tick(epoch_seconds, cron=self.cron, every_seconds=self.every_seconds, timezone=self.timezone)

    def tick_before(self, tick: int) -> int:
        """The tick just before ``tick`` (ticks are whole seconds)."""
        return self.previous_tick(tick - 0.5)

    @property
    def queue(self) -> str:
        """The queue a tick is pushed to: the definition's, else the class's, else
        ``JOBSAPP["DEFAULT_QUEUE"]``, resolved by ``client.job_template`` at each call: ``claim``
        reads it for every tick it pushes, so a settings change applies from the next tick. The
        copy written in the ``cron_job:<name>`` hash (``register``, once per worker start, for the
        dashboard and sidekiq-cron's ``message``) is the value as of that start."""
        return self.named_queue or registry.job_template(self.job_class).queue

    @property
    def schedule(self) -> str:
        """The schedule as people read it: ``every 10 s`` or ``*/5 * * * * (Europe/Paris)``."""
        if self.every_seconds:
            return f"every {self.every_seconds} s"
        return (self.cron or "") if self.timezone == "UTC" else f"{self.cron} ({self.timezone})"

    @property
    def ruby_cron(self) -> str:
        """The ``cron`` field as sidekiq-cron reads it: Fugit takes a trailing zone name; an
        ``every`` job has none, so a Ruby poller finds it invalid and leaves it alone."""
        if self.every_seconds or not self.cron:
            return ""
        return self.cron if self.timezone == "UTC" else f"{self.cron} {self.timezone}"

    def item(self, jid: str) -> dict[str, Any]:
        """The job as pushed (without ``enqueued_at``, which the claim script stamps)."""
        template = registry.job_template(self.job_class)
        item: dict[str, Any] = {"class": template.wire_name, "args": list(self.args)}
        item.update(template.options)
        level = priority.of_item(item)  # the class's priority: the claim pushes to the queue's priority ZSET
        if level is None:
            item.pop(PRIORITY_KEY, None)  # 0 or none: a plain job, Sidekiq's layout
        else:
            item[PRIORITY_KEY] = level
        item["queue"] = self.queue
        item["jid"] = jid
        item["created_at"] = None  # set by the caller
        if self.kwargs:
            item["kwargs"] = dict(self.kwargs)
        item[PERIODIC_KEY] = self.name
        return item


def periodic_job(
    name: str | None = None,
    *,
    cron: str | None = None,
    every: int | None = None,
    args: list[Any] | tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    queue: str | None = None,
    timezone: str | None = None,
    missed: str = "run_once",
    description: str = "",
) -> Callable[[type[Job]], type[Job]]:
    """Class decorator: run this job on a schedule, as a ``JOBSAPP["PERIODIC"]`` entry would.

    ``cron`` (5 fields, or 6 with seconds first as sidekiq-cron's) or ``every`` (seconds); the
    name defaults to the job's wire name. Checked when the workers start (and by ``check``).
    """

    def apply(cls: type[Job]) -> type[Job]:
        spec: dict[str, Any] = {"class": cls, "args": list(args), "missed": missed, "description": description}
        for key, value in (("cron", cron), ("every", every), ("kwargs", kwargs), ("queue", queue), ("timezone", timezone)):
            if value is not None:
                spec[key] = value
        _declared[name or cls.wire_name()] = spec
        return cls

    return apply


def declare(specs: dict[str, dict[str, Any]], *, source: str) -> None:
    """Entries from another source (``jobsapp.celery``'s ``beat_schedule``), in ``PERIODIC``'s
    format, checked with the others when the workers start; replaces that source's earlier ones."""
    for name in _declared_by.pop(source, set()):
        _declared.pop(name, None)
    _declared.update(specs)
    _declared_by[source] = set(specs)


def _job_class(name: str, value: object) -> type[Job]:
    if isinstance(value, type) and issubclass(value, Job):
        return value
    if not isinstance(value, str) or not value:
        raise ImproperlyConfigured(f'periodic job {name!r}: "class" must be a job class path, not {value!r}')
    try:
        return registry.lookup(value)
    except UnknownJobClass:
        pass
    for wire_name in registry.names():  # a dotted path to a class registered under another name
        candidate = registry.lookup(wire_name)
        if f"{candidate.__module__}.{candidate.__qualname__}" == value:
            return candidate
    raise ImproperlyConfigured(
        f"periodic job {name!r}: {value!r} is not a registered job class "
        "(define it in the jobs.py of an installed app; only registered classes ever run)"
    )


def build(name: str, spec: dict[str, Any]) -> Definition:
    """Validate one ``PERIODIC`` entry; ImproperlyConfigured says what is wrong."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ImproperlyConfigured(f"periodic job name {name!r}: use a non-empty name without ':'")
    if not isinstance(spec, dict):
        raise ImproperlyConfigured(f"periodic job {name!r}: expected a dict, got {type(spec).__name__}")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ImproperlyConfigured(f"periodic job {name!r}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(SPEC_KEYS))}")
    job_class = _job_class(name, spec.get("class"))
    cron, every = spec.get("cron"), spec.get("every")
    if (cron is None) == (every is None):
        raise ImproperlyConfigured(f'periodic job {name!r}: give exactly one of "cron" and "every"')
    timezone = spec.get("timezone") or "UTC"
    try:
        zoneinfo.ZoneInfo(str(timezone))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ImproperlyConfigured(f"periodic job {name!r}: unknown timezone {timezone!r} (use an IANA name like Europe/Paris)")
    if cron is not None:
        if not isinstance(cron, str) or not is_valid_cron(cron):
            raise ImproperlyConfigured(f"periodic job {name!r}: {cron!r} is not a cron expression (5 fields, or 6 with seconds first)")
        try:
            next_tick(time.time(), cron=cron, every_seconds=None, timezone=str(timezone))
        except ValueError:  # croniter's CroniterError: a valid expression no date matches
            raise ImproperlyConfigured(f"periodic job {name!r}: {cron!r} can never fire (no date matches it, e.g. 30 February)")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise ImproperlyConfigured(f'periodic job {name!r}: "every" must be a whole number of seconds >= 1, not {every!r}')
    args = spec.get("args", [])
    kwargs = spec.get("kwargs") or {}
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict):
        raise ImproperlyConfigured(f'periodic job {name!r}: "args" must be a list and "kwargs" a dict')
    try:
        check_json_native(list(args), "args")
        check_json_native(kwargs, "kwargs")
    except TypeError as exc:
        raise ImproperlyConfigured(f"periodic job {name!r}: {exc}")
    missed = spec.get("missed", "run_once")
    if missed not in MISSED_CHOICES:
        raise ImproperlyConfigured(f'periodic job {name!r}: "missed" must be "run_once" or "skip", not {missed!r}')
    queue = spec.get("queue")  # None: the class's queue or DEFAULT_QUEUE, at each push (Definition.queue)
    return Definition(
        name=name,
        job_class=job_class,
        cron=cron,
        every_seconds=every,
        args=list(args),
        kwargs=dict(kwargs),
        named_queue=str(queue) if queue else None,
        timezone=str(timezone),
        missed=missed,
        description=str(spec.get("description", "")),
    )


def validate() -> tuple[list[Definition], list[str]]:
    """Every periodic job of this installation (settings first, then decorated classes) that
    validates, and the reason of each one that does not: ``check`` reports them all at once."""
    configured = jobs_settings.PERIODIC or {}
    if not isinstance(configured, dict):
        return [], ['JOBSAPP["PERIODIC"] must be a dict of name -> {"class": ..., "cron" or "every": ...}']
    problems = []
    clash = sorted(set(configured) & set(_declared))
    if clash:
        problems.append(f"periodic job(s) {', '.join(clash)} defined both in settings and by @periodic_job")
    valid = []
    for name, spec in {**configured, **_declared}.items():
        try:
            valid.append(build(name, spec))
        except ImproperlyConfigured as error:
            problems.append(str(error))
    return valid, problems


def definitions() -> list[Definition]:
    """Every periodic job of this installation; ImproperlyConfigured names every bad entry
    (a name both in settings and decorated is one)."""
    valid, problems = validate()
    if problems:
        raise ImproperlyConfigured("; ".join(problems))
    return valid


def register(client: redis.Redis, definition: Definition, *, server_now: float) -> None:
    """Write the definition in sidekiq-cron's layout; keep its status and claims. A job seen for
    the first time gets its current tick recorded as done, so it starts from the next one."""
    key = keys.cron_job(definition.name)
    message = {key: value for key, value in definition.item("").items() if key not in ("jid", "created_at")}
    pipe = client.pipeline(transaction=True)
    pipe.sadd(keys.CRON_JOBS, key)
    pipe.hset(
        key,
        mapping={
            "name": definition.name,
            "klass": definition.job_class.wire_name(),
            "cron": definition.ruby_cron,
            "description": definition.description,
            "args": compact_json(definition.args),
            "message": compact_json(message),
            "active_job": "false",
            "date_as_argument": "false",
            "symbolize_args": "false",
            "jobsapp_schedule": definition.schedule,
            "jobsapp_cron": definition.cron or "",
            "jobsapp_every": definition.every_seconds or "",
            "jobsapp_timezone": definition.timezone,
            "jobsapp_missed": definition.missed,
            "jobsapp_queue": definition.queue,
        },
    )
    pipe.hsetnx(key, "status", "enabled")
    pipe.hsetnx(key, "jobsapp_last_tick", definition.previous_tick(server_now))
    pipe.execute()


def claim(client: redis.Redis, definition: Definition, tick: int, *, created_at: float) -> tuple[bool, str, str]:
    """Try to claim ``tick`` of ``definition``; (pushed, outcome, jid). See periodic_claim.lua."""
    jid = new_jid()
    item = definition.item(jid)
    item["created_at"] = created_at
    if expiry.EXPIRES_IN_KEY in item:  # the script pushes it now: it expires expires_in from now
        expiry.stamp(item, scheduled_at=None, timestamp=created_at)
    moment = dt.datetime.fromtimestamp(tick, dt.UTC)
    reply = scripts.periodic_claim(
        client,
        name=definition.name,
        queue=item["queue"],  # resolved now (Definition.queue), the same as in the payload
        level=priority.of_item(item),
        tick=tick,
        tick_before=definition.tick_before(tick),
        tick_iso=moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        tick_ruby=moment.strftime(RUBY_TIME_FORMAT),
        data=compact_json(item),
        jid=jid,
        missed=definition.missed,
        missed_after_seconds=MISSED_AFTER_SECONDS,
        jid_history_size=JID_HISTORY_SIZE,
    )
    if reply.ignored_last_tick:  # repaired by this very claim: logged once
        logger.warning(
            "periodic %s: its jobsapp_last_tick was %r, not a past tick: ignored and replaced", definition.name, reply.ignored_last_tick
        )
    return reply.pushed, reply.outcome, jid


def record_outcome(client: redis.Redis, item: dict[str, Any], *, error: BaseException | None, finished_at: float) -> None:
    """Note how a job pushed by a tick ended (for the dashboard); a lost write only loses that note."""
    name = item.get(PERIODIC_KEY)
    if not isinstance(name, str) or not name:
        return
    outcome = "succeeded" if error is None else f"failed: {type(error).__name__}"
    try:
        client.hset(
            keys.cron_job(name),
            mapping={
                "jobsapp_last_outcome": outcome,
                "jobsapp_last_finished_at": repr(finished_at),
                "jobsapp_last_outcome_jid": str(item.get("jid", "")),
            },
        )
    except CONNECTION_ERRORS as exc:  # the job's own fate is decided elsewhere; only the note is lost
        logger.warning("periodic %s: could not record the outcome (%s)", name, exc)


class PeriodicScheduler(PollingComponent):
    """Claims the ticks of this installation's periodic jobs; see the module header. A Redis
    outage or refusal is logged once and retried with backoff (each claim is atomic)."""

    thread_name = "periodic"
    logger = logger

    def __init__(
        self, *, client: redis.Redis, jobs: list[Definition], poll_seconds: float = PERIODIC_POLL_SECONDS, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__(clock=clock)
        self.client = client
        self.jobs = jobs
        self.poll_seconds = poll_seconds
        self._registered: set[str] = set()  # names whose hash this process wrote
        self._asked: dict[str, int] = {}  # name -> last tick this process asked about
        self._broken: set[str] = set()  # names whose last poll failed (logged once until they recover)

    def tick(self) -> float:
        """Claim every job's latest tick not asked about yet; seconds until the next tick. An
        entry that fails is logged once and skipped; the others are ticked all the same."""
        now = server_time(self.client)
        wait = self.poll_seconds
        for definition in self.jobs:
            try:
                wait = min(wait, self._tick_one(definition, now))
            except OUTAGE_RESPONSES:  # concerns every entry: the component's backoff, the next poll retries
                raise
            except ENTRY_ERRORS as exc:  # this entry's cron or hash is broken: no job pushed for it, retried next poll
                if definition.name not in self._broken:
                    logger.error(
                        "periodic %s: skipped, the other periodic jobs keep their ticks (%s: %s)", definition.name, type(exc).__name__, exc
                    )
                self._broken.add(definition.name)
            else:
                if definition.name in self._broken:
                    logger.info("periodic %s: ticking again", definition.name)
                self._broken.discard(definition.name)
        return max(wait, 0.0)

    def _tick_one(self, definition: Definition, now: float) -> float:
        """Register (once) and claim one entry's latest tick; seconds until its next tick."""
        if definition.name not in self._registered:
            register(self.client, definition, server_now=now)
            self._registered.add(definition.name)
        tick = definition.previous_tick(now)
        if self._asked.get(definition.name) != tick:
            pushed, outcome, jid = claim(self.client, definition, tick, created_at=now)
            if outcome != "early":
                self._asked[definition.name] = tick
            if pushed:
                logger.info("periodic %s: tick %d enqueued as jid=%s", definition.name, tick, jid)
            elif outcome == "skipped":
                logger.info("periodic %s: missed tick %d skipped", definition.name, tick)
        return definition.next_tick(now) - now

    def poll(self) -> float:
        # a little past the tick, so the server's clock has reached it when we ask
        return self.tick() + 0.002
