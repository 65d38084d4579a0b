"""A task's exception as data, in Celery's shape: ``{"exc_type", "exc_message", "exc_module"}``.

Celery's result backends store a failure as the exception's class name, its ``args`` and its
module, and rebuild it when the result is read: ``get()`` raises
``ExpectedException('Task expected to fail', 'test')``, not an exception whose one argument is
the text of the others. Here the same three travel in the result record as one JSON field
(``EXCEPTION_FIELD``) beside the engine's ``error_class`` / ``error_message``; arguments that
JSON cannot hold are kept as their ``repr``. Reading it back (``result.rebuild_exception``)
rebuilds only a class that is already loaded in the reader's process and is a
``BaseException`` subclass: a result never imports anything, and no other code runs.
"""

from __future__ import annotations

import json
from typing import Any

from ..payload import compact_json

#: The result record's field holding the exception as Celery stores it (JSON).
EXCEPTION_FIELD = "celery_exception"
#: A chord callback's record: the exception (same shape) of the header task that failed the chord.
CHORD_DEPENDENCY_FIELD = "celery_chord_dependency"


def _portable(value: Any) -> Any:
    """``value`` when JSON holds it as it is, else its ``repr``."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value


def exception_dict(exc: BaseException) -> dict[str, Any]:
    kind = type(exc)
    return {"exc_type": kind.__qualname__, "exc_module": kind.__module__, "exc_message": [_portable(each) for each in exc.args]}


def exception_fields(exc: BaseException) -> dict[str, str]:
    """The result record's fields that keep ``exc`` rebuildable."""
    return {EXCEPTION_FIELD: compact_json(exception_dict(exc), allow_nan=True)}


def parse(raw: str | bytes | None) -> dict[str, Any] | None:
    """The stored exception dict, or None when there is none (or it is not one)."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:  # an unreadable field: the engine's error_class/message describe the error
        return None
    if isinstance(data, dict) and isinstance(data.get("exc_type"), str) and isinstance(data.get("exc_module"), str):
        return data
    return None
