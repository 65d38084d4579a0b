"""``PeriodicSet``: the periodic jobs in Redis, ours and a Ruby app's sidekiq-cron jobs alike.

Reads sidekiq-cron 1.8's layout (``cron_jobs`` SET of ``cron_job:<name>`` HASH keys, see
keys.py) in two pipelined round trips. A job of ours has ``jobsapp_*`` fields (schedule, last
tick, last outcome); a Ruby one has only sidekiq-cron's, and its next run is computed from its
cron field when it parses (Fugit's trailing zone name is understood). Enable and disable write
the ``status`` field both tickers read at each claim; "run now" pushes the stored ``message``
under a fresh jid through ``jobsapp.client`` and does not count as a tick. Redis connection
errors raise ``RedisUnavailable``.

Any client can write these hashes, so no field is trusted: a time, count or interval that is
not a sane number (``inf``, ``nan``, 400 digits, text) reads as absent and is named in the
job's ``malformed`` list, so the dashboard and ``jobs periodic`` show the entry as malformed
instead of failing; a ``cron_jobs`` member that is not a hash is shown the same way.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import zoneinfo
from dataclasses import dataclass
from typing import Any

import redis

from .. import client, keys
from ..connection import as_text, get_redis
from ..cron import JID_HISTORY_SIZE, RUBY_TIME_FORMAT, next_tick, server_time
from ..payload import parse_json
from .guard import translate_errors


def _parse_ruby_time(text: str) -> float | None:
    for form in (RUBY_TIME_FORMAT.replace("+0000", "%z"), "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S%z"):
        try:
            moment = dt.datetime.strptime(text, form)
        except ValueError:
            continue
        return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()
    return None


def _is_zone(text: str) -> bool:
    try:
        zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return False
    return True


#: The latest time a field may hold (the end of year 9999): beyond it, no date prints.
LATEST_EPOCH_SECONDS = 253_402_300_799.0
#: The longest ``every`` that reads as an interval (100 years); more is malformed.
LONGEST_EVERY_SECONDS = 100 * 366 * 86_400


def _float(text: str) -> float | None:
    """A time field: epoch seconds between 0 and year 9999, else None."""
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    if value is None or not math.isfinite(value) or not 0 <= value <= LATEST_EPOCH_SECONDS:
        return None
    return value


def _count(text: str) -> int | None:
    """A count field: a whole number below 2**63, else None."""
    text = text.strip()
    if not text.isdigit() or len(text) > 18:
        return None
    return int(text)


#: Fields of ours read as times or counts, checked by ``malformed``.
_TIME_FIELDS = ("jobsapp_last_enqueued_at", "jobsapp_last_finished_at", "jobsapp_last_tick")
_COUNT_FIELDS = ("jobsapp_enqueued_count",)


@dataclass(frozen=True)
class PeriodicJob:
    """One ``cron_job:<name>`` hash, decoded."""

    name: str
    fields: dict[str, str]
    server_now: float
    #: The ``cron_job:<name>`` key holds another type (another client wrote it): no fields.
    not_a_hash: bool = False

    @property
    def malformed(self) -> list[str]:
        """The fields that do not hold what sidekiq-cron's layout and ours say (empty: sound)."""
        if self.not_a_hash:
            return ["the key is not a hash"]
        bad = [name for name in _TIME_FIELDS if self.fields.get(name) and _float(self.fields[name]) is None]
        bad += [name for name in _COUNT_FIELDS if self.fields.get(name) and _count(self.fields[name]) is None]
        if self.fields.get("jobsapp_every") and self._every() is None:
            bad.append("jobsapp_every")
        if self.fields.get("last_enqueue_time") and _parse_ruby_time(self.fields["last_enqueue_time"]) is None:
            bad.append("last_enqueue_time")
        return bad

    def _every(self) -> int | None:
        every = _count(self.fields.get("jobsapp_every", ""))
        return every if every is not None and 1 <= every <= LONGEST_EVERY_SECONDS else None

    @property
    def ours(self) -> bool:
        """Defined by a jobsapp installation (else a Ruby app's sidekiq-cron job)."""
        return "jobsapp_schedule" in self.fields

    @property
    def job_class(self) -> str:
        return self.fields.get("klass", "")

    @property
    def queue(self) -> str:
        if self.fields.get("jobsapp_queue"):
            return self.fields["jobsapp_queue"]
        message = self.message
        return str(message.get("queue") or "default")

    @property
    def message(self) -> dict[str, Any]:
        try:
            decoded = parse_json(self.fields.get("message") or "{}")
        except ValueError:  # any bytes another client wrote (nested 100,000 deep too): no message
            return {}
        return decoded if isinstance(decoded, dict) else {}

    @property
    def schedule(self) -> str:
        return self.fields.get("jobsapp_schedule") or self.fields.get("cron", "")

    @property
    def enabled(self) -> bool:
        return self.fields.get("status", "enabled") != "disabled"

    @property
    def last_enqueued_at(self) -> float | None:
        """When the last tick (or run-now) was pushed, epoch seconds."""
        return _float(self.fields.get("jobsapp_last_enqueued_at", "")) or _parse_ruby_time(self.fields.get("last_enqueue_time", ""))

    @property
    def next_run_at(self) -> float | None:
        """The next tick by the server's clock; None for a Ruby cron we cannot parse."""
        if self.fields.get("jobsapp_every"):
            every = self._every()
            return None if every is None else _sane(next_tick(self.server_now, cron=None, every_seconds=every))
        try:
            if self.ours:
                return _sane(
                    next_tick(
                        self.server_now,
                        cron=self.fields["jobsapp_cron"],
                        every_seconds=None,
                        timezone=self.fields.get("jobsapp_timezone") or "UTC",
                    )
                )
            cron, timezone = self.fields.get("cron", ""), "UTC"
            parts = cron.split()
            if len(parts) > 5 and _is_zone(parts[-1]):  # Fugit's "0 9 * * * Europe/Paris"
                cron, timezone = " ".join(parts[:-1]), parts[-1]
            return _sane(next_tick(self.server_now, cron=cron, every_seconds=None, timezone=timezone))
        except (ValueError, OverflowError, KeyError, LookupError, zoneinfo.ZoneInfoNotFoundError):  # a cron only Fugit understands, or none
            return None

    @property
    def last_outcome(self) -> str:
        return self.fields.get("jobsapp_last_outcome", "")

    @property
    def last_finished_at(self) -> float | None:
        return _float(self.fields.get("jobsapp_last_finished_at", ""))

    @property
    def enqueued_count(self) -> int:
        return _count(self.fields.get("jobsapp_enqueued_count", "")) or 0

    @property
    def last_jid(self) -> str:
        return self.fields.get("jobsapp_last_jid", "")


def _sane(epoch_seconds: float) -> float | None:
    return _float(repr(float(epoch_seconds)))


class PeriodicSet:
    """Every periodic job in Redis (``cron_jobs``), sorted by name."""

    @staticmethod
    @translate_errors
    def all() -> list[PeriodicJob]:
        connection = get_redis()
        members = sorted(as_text(member) for member in connection.smembers(keys.CRON_JOBS))
        pipe = connection.pipeline(transaction=False)
        for member in members:
            pipe.hgetall(member)
        pipe.execute_command("TIME")  # a cluster pipeline refuses .time(), not the command
        *replies, (seconds, microseconds) = pipe.execute(raise_on_error=False)
        now = float(seconds) + float(microseconds) / 1_000_000
        jobs = []
        for member, reply in zip(members, replies, strict=True):
            if isinstance(reply, redis.ResponseError):  # WRONGTYPE: another client wrote something else there
                jobs.append(PeriodicJob(keys.cron_job_name(member), {}, now, not_a_hash=True))
                continue
            if not reply:
                continue
            fields = {as_text(key): as_text(value) for key, value in reply.items()}
            jobs.append(PeriodicJob(fields.get("name") or keys.cron_job_name(member), fields, now))
        return jobs

    @staticmethod
    @translate_errors
    def get(name: str) -> PeriodicJob | None:
        connection = get_redis()
        try:
            reply = connection.hgetall(keys.cron_job(name))
        except redis.ResponseError:  # WRONGTYPE: another client wrote something else there
            return PeriodicJob(name, {}, server_time(connection), not_a_hash=True)
        if not reply:
            return None
        fields = {as_text(key): as_text(value) for key, value in reply.items()}
        return PeriodicJob(name, fields, server_time(connection))

    @staticmethod
    @translate_errors
    def set_enabled(name: str, enabled: bool) -> bool:
        """Enable or disable a periodic job by name; False when there is none."""
        connection = get_redis()
        key = keys.cron_job(name)
        if not connection.exists(key):
            return False
        try:
            connection.hset(key, "status", "enabled" if enabled else "disabled")
        except redis.ResponseError:  # WRONGTYPE: not a periodic job's hash, nothing to switch
            return False
        return True

    @staticmethod
    @translate_errors
    def run_now(name: str) -> str | None:
        """Push the job once now (not a tick); its jid, or None when there is no such job.
        ValueError says why when its stored message cannot be pushed (another client wrote it)."""
        job = PeriodicSet.get(name)
        if job is None or not job.message.get("class"):
            return None
        item = {key: value for key, value in job.message.items() if key not in ("jid", "enqueued_at", "created_at", "at")}
        try:
            jid = client.push(item)
        except (TypeError, ValueError) as exc:  # refused before anything was written: nothing pushed
            raise ValueError(f"periodic job {name!r}: its stored message cannot be pushed ({exc})") from None
        if jid is not None:
            connection = get_redis()
            now = dt.datetime.fromtimestamp(server_time(connection), dt.UTC)
            pipe = connection.pipeline(transaction=False)
            pipe.hset(
                keys.cron_job(name),
                mapping={
                    "last_enqueue_time": now.strftime(RUBY_TIME_FORMAT),
                    "jobsapp_last_enqueued_at": repr(now.timestamp()),
                    "jobsapp_last_jid": jid,
                },
            )
            pipe.lpush(keys.cron_job_jid_history(name), json.dumps({"jid": jid, "enqueued": now.strftime("%Y-%m-%dT%H:%M:%SZ")}))
            pipe.ltrim(keys.cron_job_jid_history(name), 0, JID_HISTORY_SIZE - 1)
            pipe.execute()
        return jid
