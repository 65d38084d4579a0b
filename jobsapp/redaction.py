"""Hiding secrets in job arguments before anyone sees them (dashboard, CLI, logs).

A value is replaced by ``"[REDACTED]"`` when the key that holds it *contains* one of the words
in ``JOBSAPP["REDACT_KEYS"]``, compared case-insensitively (``password`` also hides
``db_password`` and ``PasswordHash``): over-hiding costs a glance, under-hiding leaks a credential.
The walk is recursive through dicts and lists and returns new objects; the payload in Redis is
never changed. Positional secrets (``perform(user, "hunter2")``) have no key and cannot be told
apart from data; pass secrets by keyword or, better, not at all.

``redact_url`` hides the credentials of a Redis URL for banners, logs and error messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from .conf import jobs_settings

REDACTED = "[REDACTED]"


def secret_words() -> tuple[str, ...]:
    """The configured words, lowercased (read on every call so tests can override them)."""
    return tuple(str(word).lower() for word in jobs_settings.REDACT_KEYS if str(word))


def is_secret_key(key: str, words: Iterable[str] | None = None) -> bool:
    """True when ``key`` contains a secret word, ignoring case."""
    lowered = key.lower()
    return any(word in lowered for word in (secret_words() if words is None else words))


def redact(value: Any, words: tuple[str, ...] | None = None) -> Any:
    """A copy of ``value`` with every secret-keyed value replaced, at any depth."""
    if words is None:
        words = secret_words()
    if isinstance(value, dict):
        return {
            key: REDACTED if isinstance(key, str) and is_secret_key(key, words) else redact(element, words)
            for key, element in value.items()
        }
    if isinstance(value, list):
        return [redact(element, words) for element in value]
    return value


#: Query parameters of a Redis URL whose values are credentials (redis-py reads ``?password=``).
SECRET_URL_PARAMETERS = ("password", "passwd", "secret", "token", "username", "user")


def redact_url(url: str) -> str:
    """``url`` without its credentials, parsed as a URL (not by splitting on ``@``).

    ``redis://user:p@ss@host:6379/0`` -> ``redis://***@host:6379/0``: the user info is hidden
    whole (a lone ``secret@`` is as likely a password as a user name), so are the values of
    credential query parameters. Anything that does not parse is hidden entirely.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparseable Redis URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = ("***@" if "@" in parts.netloc else "") + host + (f":{port}" if port is not None else "")
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(key, "***" if any(word in key.lower() for word in SECRET_URL_PARAMETERS) else value) for key, value in pairs], safe="*/"
        )
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
