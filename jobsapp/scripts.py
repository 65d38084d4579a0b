"""Loads the Lua scripts in ``jobsapp/lua/`` once, by name, and runs them with EVALSHA.

Each ``lua/<verb>.lua`` is one atomic operation whose header documents KEYS, ARGV, the return
value and the cost. ``script("fetch")`` returns a runner bound to nothing: pass the client (or a
pipeline) on each call, so the same runner serves every thread, the fetcher's blocking connection
and pipelines alike. A NOSCRIPT reply (a restarted or flushed server) reloads the script
transparently; redis-py's Script object does that for us.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import redis
from redis.commands.core import Script

LUA_DIRECTORY = Path(__file__).resolve().parent / "lua"

_lock = threading.Lock()


@cache
def source(name: str) -> str:
    path = LUA_DIRECTORY / f"{name}.lua"
    if not path.is_file():
        raise LookupError(f"no Lua script {name!r} in {LUA_DIRECTORY}")
    return path.read_text(encoding="utf-8")


class Runner:
    """One script; call it with a client or pipeline, keys and args."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = source(name)
        # Bytes source: the sha is computed without a client, so one object serves every
        # client and pipeline; NOSCRIPT (a restarted server) makes redis-py load it again.
        self._script = Script(None, self.source.encode("utf-8"))  # type: ignore[arg-type]

    def __call__(self, client: redis.Redis | redis.client.Pipeline, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        return self._script(keys=list(keys), args=list(args), client=client)


_runners: dict[str, Runner] = {}


def script(name: str) -> Runner:
    """The runner for ``lua/<name>.lua`` (loaded once per process)."""
    runner = _runners.get(name)
    if runner is None:
        with _lock:
            runner = _runners.setdefault(name, Runner(name))
    return runner
