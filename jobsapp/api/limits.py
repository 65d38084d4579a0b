"""``LimiterSet``: the limiters in use (``jobsapp.limiter``), with how full each one is now; and
``UniqueLocks``: the live locks of unique jobs (``jobsapp.unique``).

Reads keys.LIMITERS and each limiter's HASH in one pipeline, then counts the live holders of
the concurrent and window limiters in a second one (holders past their expiry, or admissions
older than the window, are not counted, though the scripts only drop them on the next entry).
Redis connection errors raise ``RedisUnavailable``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import keys
from ..connection import as_text, get_redis
from .guard import translate_errors


@dataclass(frozen=True)
class LimiterState:
    name: str
    kind: str
    limit: int
    per_seconds: float | None
    lock_timeout_seconds: float | None
    in_use: int  # concurrent: slots held; window: admissions in the window; bucket: this interval's
    over_limit: int  # refusals since the limiter was first used


def _float(text: str) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


class LimiterSet:
    @staticmethod
    @translate_errors
    def all() -> list[LimiterState]:
        connection = get_redis()
        names = sorted(as_text(name) for name in connection.smembers(keys.LIMITERS))
        pipe = connection.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(keys.limiter(name))
        pipe.execute_command("TIME")  # a cluster pipeline refuses .time(), not the command
        *replies, (seconds, microseconds) = pipe.execute()
        now = float(seconds) + float(microseconds) / 1_000_000
        configs = [{as_text(key): as_text(value) for key, value in reply.items()} for reply in replies]
        pipe = connection.pipeline(transaction=False)
        for name, config in zip(names, configs, strict=True):
            if config.get("kind") == "concurrent":
                pipe.zcount(keys.limiter_holders(name), f"({now!r}", "+inf")
            elif config.get("kind") == "window":
                pipe.zcount(keys.limiter_holders(name), f"({now - (_float(config.get('per_seconds', '')) or 0.0)!r}", "+inf")
        counts = iter(pipe.execute() if len(pipe) else [])
        states = []
        for name, config in zip(names, configs, strict=True):
            kind = config.get("kind", "")
            if kind in ("concurrent", "window"):
                in_use = int(next(counts))
            else:
                per = _float(config.get("per_seconds", "")) or 1.0
                current = config.get("interval") == str(int(now // per))
                in_use = int(config.get("count") or 0) if current else 0
            states.append(
                LimiterState(
                    name=name,
                    kind=kind,
                    limit=int(_float(config.get("limit", "")) or 0),
                    per_seconds=_float(config.get("per_seconds", "")),
                    lock_timeout_seconds=_float(config.get("lock_timeout", "")),
                    in_use=in_use,
                    over_limit=int(config.get("over_limit") or 0),
                )
            )
        return states


@dataclass(frozen=True)
class UniqueLock:
    digest: str
    jid: str  # the job holding it
    expires_in_seconds: float


class UniqueLocks:
    """The live unique-job locks, read with SCAN (never KEYS), at most ``limit`` of them."""

    @staticmethod
    @translate_errors
    def all(limit: int = 1000) -> list[UniqueLock]:
        connection = get_redis()
        names = []
        for name in connection.scan_iter(match=keys.UNIQUE_LOCK_PATTERN, count=500):
            names.append(as_text(name))
            if len(names) >= limit:
                break
        pipe = connection.pipeline(transaction=False)
        for name in names:
            pipe.get(name)
            pipe.pttl(name)
        replies = pipe.execute() if names else []
        prefix = keys.unique_lock("")
        locks = [
            UniqueLock(name[len(prefix) :], as_text(holder), max(int(ttl), 0) / 1000)
            for name, holder, ttl in zip(names, replies[::2], replies[1::2], strict=True)
            if holder is not None
        ]
        return sorted(locks, key=lambda lock: lock.expires_in_seconds)

    @staticmethod
    @translate_errors
    def release(digest: str) -> bool:
        """Drop a lock by hand (its job stays where it is); False when there was none."""
        return bool(get_redis().delete(keys.unique_lock(digest)))
