"""Judging a settings dict against its defaults: unknown keys, wrong types, numbers out of range.

Public (``jobsapp.settings_problems``): the engine's checks judge ``settings.JOBSAPP`` with it
(``jobsapp.checks``, ids E001/E005/E006) and an app built on the engine judges its own settings
dict the same way under its own check ids (``tracking.checks``: TRACKING, E004-E006). A default's
type is the rule (a ``None`` default accepts anything; a ``*_SECONDS`` whole number accepts a
float); numbers are at least 0, or at least 1 for the keys named in ``at_least_one``.

No thread, no Redis, no registration: it returns Django check messages and registers nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.core import checks

__all__ = ["expected_type", "settings_problems"]


def expected_type(default: Any) -> tuple[type, ...] | None:
    """The types a setting may take, judged by its default (None: no rule)."""
    if default is None:
        return None
    if isinstance(default, bool):
        return (bool,)
    if isinstance(default, int):
        return (int,)
    if isinstance(default, float):
        return (int, float)
    if isinstance(default, (list, tuple)):
        return (list, tuple)
    if isinstance(default, dict):
        return (dict,)
    if isinstance(default, str):
        return (str,)
    return None


TYPE_NAMES = {bool: "True or False", int: "a whole number", float: "a number", list: "a list", dict: "a dict", str: "a string"}


def settings_problems(
    setting: str,
    user: Any,
    defaults: Mapping[str, Any],
    *,
    ids: Mapping[str, str],
    at_least_one: frozenset[str] = frozenset(),
    skip: frozenset[str] = frozenset(),
) -> list[checks.CheckMessage]:
    """Unknown keys, wrong types and ranges of one settings dict, judged against its defaults;
    ``ids`` names the check id of each (keys "unknown", "type", "range"). Shared with
    ``tracking.checks`` (public as ``jobsapp.settings_problems``)."""
    # Imported here, where checks run: Django's checks package imports every check module (mail,
    # templates, caches), start-up that ``python -m jobsapp``'s read subcommands never use.
    from django.core import checks

    if user is None:
        return []
    if not isinstance(user, Mapping):
        return [
            checks.Error(
                f"settings.{setting} is {type(user).__name__}, not a dict.",
                hint=f"Set {setting} = {{...}} with the keys you change; every key and its default are in the app's conf.py.",
                id=ids["type"],
            )
        ]
    messages: list[checks.CheckMessage] = []
    unknown = sorted(str(key) for key in set(user) - set(defaults))
    if unknown:
        messages.append(
            checks.Error(
                f"Unknown {setting} setting(s): {', '.join(unknown)}.",
                hint=f"Known keys: {', '.join(sorted(defaults))} (see the app's conf.py for their defaults).",
                id=ids["unknown"],
            )
        )
    for key in sorted(set(user) & set(defaults) - skip):
        value, default = user[key], defaults[key]
        allowed = expected_type(default)
        if allowed == (int,) and key.endswith("_SECONDS"):
            allowed = (int, float)  # a duration given as a whole number by default may still be 2.5 s
        if allowed is None:
            continue
        wrong_type = not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed)
        if wrong_type:
            wanted = TYPE_NAMES.get(allowed[-1] if allowed != (int, float) else float, allowed[0].__name__)
            hint = f"Use {wanted}, like the default {default!r}."
            if isinstance(value, str) and isinstance(default, (list, tuple)):
                hint = f"A string is a sequence of characters: use a list, [{value!r}], not {value!r}."
            elif isinstance(value, str) and isinstance(default, (int, float)) and not isinstance(default, bool):
                hint = f"Use the number itself, {value.strip()} rather than {value!r}, if that is what you meant."
            messages.append(checks.Error(f"{setting}[{key!r}] is {value!r} ({type(value).__name__}).", hint=hint, id=ids["type"]))
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            minimum = 1 if key in at_least_one else 0
            if value < minimum or value != value:  # NaN compares false with everything
                messages.append(
                    checks.Error(
                        f"{setting}[{key!r}] is {value!r}.",
                        hint=f"Use a number >= {minimum} (default {default!r}).",
                        id=ids["range"],
                    )
                )
    return messages
