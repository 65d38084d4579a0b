"""Values as Celery's ``json`` serializer (kombu's) carries them, and how long results are kept.

``_jsonable`` gives the JSON a task's arguments and results travel as: tuples become lists, and
``datetime``, ``date``, ``time``, ``UUID``, ``Decimal`` and (UTF-8) ``bytes`` become kombu's typed
objects ``{"__type__": "datetime", "__value__": "..."}``, so the payload stays JSON and plain jobs
and Ruby workers never see a difference; a pydantic model becomes its ``model_dump``.
``decoded`` turns the typed objects back, in the task (its arguments) and in the caller (``get()``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import sys
import uuid
from typing import Any

#: How long results are kept (Celery's ``result_expires`` default: one day).
RESULT_EXPIRES_SECONDS = 24 * 3600

#: kombu's JSON type marker keys: ``{"__type__": "datetime", "__value__": "2026-01-02T03:04:05+00:00"}``.
TYPE_MARKER = "__type__"
VALUE_MARKER = "__value__"

_DECODERS: dict[str, Any] = {
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
    "uuid": uuid.UUID,
    "decimal": decimal.Decimal,
    "bytes": lambda text: text.encode("utf-8"),
}


def _encoded(value: Any) -> Any:
    """kombu's JSON encoding of the types its serializer adds to JSON, else None."""
    if isinstance(value, dt.datetime):  # before date: a datetime is a date
        return {TYPE_MARKER: "datetime", VALUE_MARKER: value.isoformat()}
    if isinstance(value, dt.date):
        return {TYPE_MARKER: "date", VALUE_MARKER: value.isoformat()}
    if isinstance(value, dt.time):
        return {TYPE_MARKER: "time", VALUE_MARKER: value.isoformat()}
    if isinstance(value, uuid.UUID):
        return {TYPE_MARKER: "uuid", VALUE_MARKER: str(value)}
    if isinstance(value, decimal.Decimal):
        return {TYPE_MARKER: "decimal", VALUE_MARKER: str(value)}
    if isinstance(value, bytes):
        return {TYPE_MARKER: "bytes", VALUE_MARKER: value.decode("utf-8")}  # kombu's: UTF-8 text only
    return None


#: The result handles' classes: ``jobsapp.celery.result`` names its base here when it is imported
#: (it sits above this module). No handle exists before its class's module is imported.
_result_handles: tuple[type, ...] = ()


def register_result_handle(kind: type) -> None:
    """Make instances of ``kind`` (which have ``as_tuple()``) travel as that tuple in arguments and results."""
    global _result_handles
    if kind not in _result_handles:
        _result_handles = (*_result_handles, kind)


def _jsonable(value: Any) -> Any:
    """Celery's JSON serializer's view (kombu's): tuples become lists; ``datetime``, ``date``,
    ``time``, ``UUID``, ``Decimal`` and (UTF-8) ``bytes`` become kombu's ``{"__type__",
    "__value__"}`` objects (``decoded`` turns them back); a pydantic model becomes its
    ``model_dump``; a result handle (``AsyncResult``, ``GroupResult``) its ``as_tuple()``.
    Anything else is checked at push (JSON-native values only)."""
    if isinstance(value, tuple | list):
        return [_jsonable(element) for element in value]
    if isinstance(value, dict):
        return {key: _jsonable(element) for key, element in value.items()}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    encoded = _encoded(value)
    if encoded is not None:
        return encoded
    if isinstance(value, _result_handles):  # a result handle travels as its as_tuple(), as Celery's backends store it
        return _jsonable(value.as_tuple())  # type: ignore[attr-defined]
    dump = getattr(value, "model_dump", None)
    if callable(dump) and "pydantic" in sys.modules and isinstance(value, sys.modules["pydantic"].BaseModel):
        return dump(mode="json")
    return value


def decoded(value: Any) -> Any:
    """A JSON value with kombu's typed objects turned back into Python values (``_jsonable``'s inverse)."""
    if isinstance(value, list):
        return [decoded(element) for element in value]
    if isinstance(value, dict):
        marker = value.get(TYPE_MARKER)
        if len(value) == 2 and isinstance(marker, str) and marker in _DECODERS and isinstance(value.get(VALUE_MARKER), str):
            try:
                return _DECODERS[marker](value[VALUE_MARKER])
            except (ValueError, ArithmeticError):  # not kombu's encoding after all: kept as it is
                return value
        return {key: decoded(element) for key, element in value.items()}
    return value
