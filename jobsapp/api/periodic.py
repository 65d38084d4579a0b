"""``PeriodicSet``: the periodic jobs in Redis, ours and a Ruby app's sidekiq-cron jobs alike.

Reads sidekiq-cron 1.8's layout (``cron_jobs`` SET of ``cron_job:<name>`` HASH keys, see
keys.py) in two pipelined round trips. A job of ours has ``jobsapp_*`` fields (schedule, last
tick, last outcome); a Ruby one has only sidekiq-cron's, and its next run is computed from its
cron field when it parses (Fugit's trailing zone name is understood). Enable and disable write
the ``status`` field both tickers read at each claim; "run now" pushes the stored ``message``
under a fresh jid through ``jobsapp.client`` and does not count as a tick. Redis connection
errors raise ``RedisUnavailable``.
"""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo
from dataclasses import dataclass
from typing import Any

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


def _float(text: str) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


@dataclass(frozen=True)
class PeriodicJob:
    """One ``cron_job:<name>`` hash, decoded."""

    name: str
    fields: dict[str, str]
    server_now: float

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
        every = self.fields.get("jobsapp_every", "")
        try:
            if every:
                return next_tick(self.server_now, cron=None, every_seconds=int(every))
            if self.ours:
                return next_tick(
                    self.server_now,
                    cron=self.fields["jobsapp_cron"],
                    every_seconds=None,
                    timezone=self.fields.get("jobsapp_timezone") or "UTC",
                )
            cron, timezone = self.fields.get("cron", ""), "UTC"
            parts = cron.split()
            if len(parts) > 5 and _is_zone(parts[-1]):  # Fugit's "0 9 * * * Europe/Paris"
                cron, timezone = " ".join(parts[:-1]), parts[-1]
            return next_tick(self.server_now, cron=cron, every_seconds=None, timezone=timezone)
        except (ValueError, KeyError, LookupError, zoneinfo.ZoneInfoNotFoundError):  # a cron only Fugit understands
            return None

    @property
    def last_outcome(self) -> str:
        return self.fields.get("jobsapp_last_outcome", "")

    @property
    def last_finished_at(self) -> float | None:
        return _float(self.fields.get("jobsapp_last_finished_at", ""))

    @property
    def enqueued_count(self) -> int:
        return int(_float(self.fields.get("jobsapp_enqueued_count", "")) or 0)

    @property
    def last_jid(self) -> str:
        return self.fields.get("jobsapp_last_jid", "")


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
        pipe.time()
        *replies, (seconds, microseconds) = pipe.execute()
        now = float(seconds) + float(microseconds) / 1_000_000
        jobs = []
        for member, reply in zip(members, replies, strict=True):
            if not reply:
                continue
            fields = {as_text(key): as_text(value) for key, value in reply.items()}
            jobs.append(PeriodicJob(fields.get("name") or keys.cron_job_name(member), fields, now))
        return jobs

    @staticmethod
    @translate_errors
    def get(name: str) -> PeriodicJob | None:
        connection = get_redis()
        reply = connection.hgetall(keys.cron_job(name))
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
        connection.hset(key, "status", "enabled" if enabled else "disabled")
        return True

    @staticmethod
    @translate_errors
    def run_now(name: str) -> str | None:
        """Push the job once now (not a tick); its jid, or None when there is no such job."""
        job = PeriodicSet.get(name)
        if job is None or not job.message.get("class"):
            return None
        item = {key: value for key, value in job.message.items() if key not in ("jid", "enqueued_at", "created_at", "at")}
        jid = client.push(item)
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
