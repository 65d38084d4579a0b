"""Celery's stamping: headers stamped onto every task of a canvas, and tasks revoked by stamp.

Producing side (the caller's thread): ``Signature.stamp`` (canvas.py) asks a ``StampingVisitor``
for headers at each node of a canvas and merges them here (``stamp_headers``, Celery's rules:
a header stamped again is replaced, or with ``append_stamps`` aggregated into a list; lists are
extended). A stamped signature keeps each stamp as an option, named in
``options["stamped_headers"]``. When the task is pushed, its stamps ride in the job's payload
under ``STAMPS_KEY`` (``{"header": value}``, JSON as kombu writes values), which a retry keeps
(the same payload) and the worker copies into ``self.request.stamps`` /
``.stamped_headers``. Plain jobs never carry the key.

Revoking by stamp (``app.control.revoke_by_stamped_headers``): each revoked ``(header, value)``
is a member of one Redis SET, ``keys.CELERY_REVOKED_STAMPS`` (``["header", value]`` as compact
JSON; on a cluster the key has the home partition's hash tag, as the result keys do). It is
fleet-wide (Celery keeps it in each worker's memory) and stays until cleared
(``revoked_stamps.clear()``). A worker about to run a task that carries stamps asks once
(``revoked_by``: one SMISMEMBER) whether one of them is revoked; a match ends the task REVOKED
before it runs, as an expired one ends (task.py). A task without stamps pays nothing. A Redis
error while checking propagates: the engine retries the job later, as any Redis outage does.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, MutableMapping
from typing import Any

from .. import api, keys
from ..connection import get_redis
from ..payload import compact_json
from .values import _jsonable

#: Payload extra: the stamps of a task, ``{"header": value}`` (their order is ``stamped_headers``').
STAMPS_KEY = "celery_stamps"
#: The signature option that lists the stamped headers (each one is an option of its own too).
STAMPED_HEADERS = "stamped_headers"


class StampingVisitor:
    """Celery's stamping visitor: ``Signature.stamp(visitor)`` calls a hook at each node of the
    canvas; the dict a hook returns is stamped onto that node's tasks. ``on_signature`` must be
    given (abstract in Celery; here it raises ``NotImplementedError`` when not overridden); the
    others default to Celery's: no headers, and a chord's header visited as a group."""

    def on_group_start(self, group: Any, **headers: Any) -> dict[str, Any]:
        """Called as a group's stamping starts; returns headers for its tasks."""
        return {}

    def on_group_end(self, group: Any, **headers: Any) -> None:
        """Called once a group's tasks are stamped."""

    def on_chain_start(self, chain: Any, **headers: Any) -> dict[str, Any]:
        """Called as a chain's stamping starts; returns headers for its tasks."""
        return {}

    def on_chain_end(self, chain: Any, **headers: Any) -> None:
        """Called once a chain's tasks are stamped."""

    def on_signature(self, sig: Any, **headers: Any) -> dict[str, Any]:
        """Called for each task signature; returns the headers to stamp onto it."""
        raise NotImplementedError(f"{type(self).__name__} must define on_signature(sig, **headers), as Celery's visitors do")

    def on_chord_header_start(self, sig: Any, **header: Any) -> dict[str, Any]:
        """Called as a chord's header is stamped: its header as a group, through ``on_group_start``."""
        return self.on_group_start(sig.header_group(), **header)

    def on_chord_header_end(self, sig: Any, **header: Any) -> None:
        """Called once a chord's header is stamped (``on_group_end`` of its header)."""
        self.on_group_end(sig.header_group(), **header)

    def on_chord_body(self, sig: Any, **header: Any) -> dict[str, Any]:
        """Called before a chord's callback is stamped; returns headers for it."""
        return {}

    def on_callback(self, callback: Any, **header: Any) -> dict[str, Any]:
        """Called for each ``link`` callback of a signature; returns headers for it."""
        return {}

    def on_errback(self, errback: Any, **header: Any) -> dict[str, Any]:
        """Called for each ``link_error`` errback of a signature; returns headers for it."""
        return {}


def merge_stamps(into: dict[str, Any], other: dict[str, Any] | None, *, aggregate: bool) -> None:
    """Merge ``other`` into ``into`` (in place), as Celery merges stamps: a key only in ``other``
    is added; a dict is merged recursively; two lists are joined; otherwise ``into`` keeps its
    value, or with ``aggregate`` both values end in one list."""
    if not other:
        return
    for key, value in list(into.items()):
        if key not in other:
            continue
        if isinstance(value, dict) and isinstance(other[key], dict):
            merge_stamps(value, other[key], aggregate=aggregate)
            continue
        if isinstance(value, int | float | str):
            into[key] = [value] if aggregate else value
        if isinstance(other[key], list) and isinstance(into[key], list):
            into[key] = [*into[key], *other[key]]
        elif aggregate:
            into[key] = [] if into[key] is None else list(into[key])
            into[key].append(other[key])
    for key, value in other.items():
        if key not in into:
            into[key] = value


def _unique(names: Any) -> list[str]:
    """The header names, each once, in their first order."""
    return list(dict.fromkeys(names or []))


def stamp_headers(
    own_options: dict[str, Any],
    visitor_headers: dict[str, Any] | None,
    headers: dict[str, Any],
    *,
    append_stamps: bool,
    self_headers: bool = True,
) -> dict[str, Any]:
    """The stamps a node gets (Celery's ``_stamp_headers``): the given ``headers``, then the
    visitor's (which win over them), then the node's own stamps (``own_options``, unless
    ``self_headers`` is False), with ``stamped_headers`` listing every stamp once."""
    merged = copy.deepcopy(headers)
    merged.setdefault(STAMPED_HEADERS, list(headers))
    if visitor_headers is not None:
        from_visitor = copy.deepcopy(visitor_headers)
        from_visitor.setdefault(STAMPED_HEADERS, list(from_visitor))
        merge_stamps(merged, from_visitor, aggregate=append_stamps)
        merged[STAMPED_HEADERS] = _unique(merged[STAMPED_HEADERS])
    if self_headers:
        names = _unique([*merged.get(STAMPED_HEADERS, []), *own_options.get(STAMPED_HEADERS, [])])
        merged[STAMPED_HEADERS] = names
        own = {key: copy.deepcopy(value) for key, value in own_options.items() if key in names}
        merge_stamps(merged, own, aggregate=append_stamps)
        merged[STAMPED_HEADERS] = _unique(merged[STAMPED_HEADERS])
    return merged


def stamped_names(options: dict[str, Any]) -> list[str]:
    """The headers a signature's options say are stamped."""
    names = options.get(STAMPED_HEADERS)
    return _unique(names) if isinstance(names, list | tuple) else []


def stamps_of(options: dict[str, Any]) -> dict[str, Any] | None:
    """The stamps of a signature's options (``{header: value}``), None when it has none."""
    names = stamped_names(options)
    if not names:
        return None
    return {name: options.get(name) for name in names}


def immutable_options(options: dict[str, Any]) -> frozenset[str]:
    """The options that later options do not override (Celery's ``_IMMUTABLE_OPTIONS`` for stamps):
    ``stamped_headers`` and each stamped header, once a signature is stamped."""
    names = stamped_names(options)
    return frozenset([STAMPED_HEADERS, *names]) if names else frozenset()


# --- revoked stamps -----------------------------------------------------------------------


def _member(header: str, value: Any) -> str:
    """The SET member of one revoked ``(header, value)``: compact JSON, values as the payload writes them."""
    return compact_json([header, _jsonable(value)], sort_keys=True)


def _values(value: Any) -> list[Any]:
    """A stamp's values: each item of a list (or tuple), else the value itself (Celery's ``maybe_list``)."""
    return list(value) if isinstance(value, list | tuple) else [value]


def revoke(headers: dict[str, Any]) -> None:
    """Flag every ``header: value`` (a value, or a list of them) as revoked, fleet-wide."""
    members = [_member(str(header), value) for header, given in headers.items() for value in _values(given)]
    if members:
        get_redis().sadd(keys.CELERY_REVOKED_STAMPS, *members)


def revoked_by(stamps: dict[str, Any]) -> dict[str, Any] | None:
    """The first of a task's stamps that is revoked (``{header: value}``), None if none is: one
    Redis read. ``stamps`` as the payload carries them (``STAMPS_KEY``)."""
    candidates = [(str(header), value) for header, stamp in stamps.items() if stamp is not None for value in _values(stamp)]
    if not candidates:
        return None
    found = get_redis().smismember(keys.CELERY_REVOKED_STAMPS, [_member(header, value) for header, value in candidates])
    for (header, value), hit in zip(candidates, found, strict=True):
        if hit:
            return {header: value}
    return None


def matching(stamps: Any, headers: dict[str, Any]) -> dict[str, list[Any]]:
    """Which of ``headers`` (header -> value or values) a task's stamps match, as Celery's
    terminating revoke compares them: ``{header: [values matched]}``."""
    found: dict[str, list[Any]] = {}
    if not isinstance(stamps, dict):
        return found
    for header, wanted in headers.items():
        stamp = stamps.get(header)
        if stamp is None:
            continue
        wanted_members = {_member(header, value) for value in _values(wanted)}
        hits = [value for value in _values(stamp) if _member(header, value) in wanted_members]
        if hits:
            found[header] = hits
    return found


def running_with(headers: dict[str, Any]) -> list[tuple[str, dict[str, list[Any]]]]:
    """The running tasks (as the workers' heartbeats list them) whose stamps match ``headers``:
    ``(task id, matched)`` pairs."""
    found = []
    for work in api.WorkSet.all():
        matched = matching(work.record.item.get(STAMPS_KEY), headers)
        if matched:
            found.append((work.record.jid, matched))
    return found


class RevokedStamps(MutableMapping[str, list[Any]]):
    """Celery's ``celery.worker.state.revoked_stamps`` for the whole fleet: header -> the list of
    its revoked values, read from Redis at each access. ``clear()`` forgets every revoked stamp;
    setting a header replaces its values; deleting one forgets its values."""

    def _read(self) -> dict[str, list[Any]]:
        revoked: dict[str, list[Any]] = {}
        for raw in get_redis().smembers(keys.CELERY_REVOKED_STAMPS):
            header, value = json.loads(raw)
            revoked.setdefault(str(header), []).append(value)
        return revoked

    def __getitem__(self, header: str) -> list[Any]:
        return self._read()[header]

    def __setitem__(self, header: str, values: Any) -> None:
        self._forget(header)
        revoke({header: values})

    def __delitem__(self, header: str) -> None:
        if not self._forget(header):
            raise KeyError(header)

    def _forget(self, header: str) -> int:
        members = [raw for raw in get_redis().smembers(keys.CELERY_REVOKED_STAMPS) if json.loads(raw)[0] == header]
        return int(get_redis().srem(keys.CELERY_REVOKED_STAMPS, *members)) if members else 0

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def clear(self) -> None:
        """Forget every revoked stamp of the fleet (tasks stamped with them run again)."""
        get_redis().delete(keys.CELERY_REVOKED_STAMPS)

    def __repr__(self) -> str:
        return f"RevokedStamps({self._read()!r})"


#: ``celery.worker.state.revoked_stamps``: the fleet's revoked stamps (``jobsapp.celery.worker.state`` re-exports it).
revoked_stamps = RevokedStamps()
