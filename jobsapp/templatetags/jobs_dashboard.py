"""Template helpers of the jobs dashboard: epoch times, durations, numbers, pagination links.

Every helper returns escaped HTML (``format_html``) or plain text that autoescaping escapes:
job data is hostile input (class names, queue names, args and error messages come from any
producer sharing the Redis).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any
from urllib.parse import urlencode

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince, timeuntil

register = template.Library()


def _datetime(epoch: Any) -> dt.datetime | None:
    if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or epoch <= 0:
        return None
    try:
        return dt.datetime.fromtimestamp(float(epoch), tz=dt.UTC)
    except (OverflowError, OSError, ValueError):  # absurd times display as "—"
        return None


def relative_time(moment: dt.datetime, now: dt.datetime) -> str:
    """ "12 s ago" / "in 5 s" under a minute (Django's timesince says "0 minutes" there), else
    "3 minutes ago" / "in 2 hours"."""
    seconds = (now - moment).total_seconds()
    if abs(seconds) < 60:
        whole = int(abs(seconds))
        return f"{whole} s ago" if seconds >= 0 else f"in {whole} s"
    return f"{timesince(moment, now)} ago" if moment <= now else f"in {timeuntil(moment, now)}"


@register.simple_tag
def epoch_time(epoch: Any, now: float | None = None) -> SafeString:
    """``<time>`` with the UTC time as its title and "12 s ago" / "3 minutes ago" / "in 2 hours"
    as text; ``now`` (epoch seconds) is the present, for tests."""
    moment = _datetime(epoch)
    if moment is None:
        return format_html("{}", "—")
    present = dt.datetime.fromtimestamp(now, tz=dt.UTC) if now is not None else dt.datetime.now(dt.UTC)
    text = relative_time(moment, present)
    iso = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, iso, text)


@register.filter
def duration(seconds: Any) -> str:
    """Seconds as "1.2 s", "4 min", "3 h 5 min", "2 d 4 h"."""
    try:
        value = float(seconds)
    except (TypeError, ValueError, OverflowError):
        return "—"
    if not math.isfinite(value):
        return "—"
    if value < 60:
        return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"
    minutes = int(value // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter
def number(value: Any) -> str:
    """Thousands separated by thin spaces: 1 234 567."""
    try:
        return f"{int(value):,}".replace(",", "\u2009")
    except (TypeError, ValueError):
        return str(value)


@register.filter
def kilobytes(value: Any) -> str:
    try:
        kb = float(value)
    except (TypeError, ValueError):
        return "—"
    if kb >= 1024 * 1024:
        return f"{kb / 1024 / 1024:.1f} GB"
    if kb >= 1024:
        return f"{kb / 1024:.0f} MB"
    return f"{kb:.0f} KB"


@register.simple_tag(takes_context=True)
def page_url(context: dict[str, Any], number: int) -> str:
    """The current URL's query with ``page`` replaced (filters kept)."""
    request = context["request"]
    query = {key: value for key, value in request.GET.items() if key != "page"}
    query["page"] = str(number)
    return "?" + urlencode(query)


@register.filter
def queue_url(name: Any) -> str:
    """The queue's page, or "" for a name no URL can carry (empty): hostile data never 500s."""
    try:
        return reverse("jobsapp:queue", args=[str(name)]) if name else ""
    except NoReverseMatch:
        return ""


@register.filter
def job_url(jid: Any) -> str:
    """The job page of a jid, or "" when the jid cannot be part of a URL (empty, has a slash)."""
    try:
        return reverse("jobsapp:job", args=[str(jid)]) if jid else ""
    except NoReverseMatch:
        return ""


@register.simple_tag
def shard_picker() -> SafeString:
    """A form choosing the Redis shard to look at; nothing when there is only one."""
    from jobsapp import shards

    names = shards.names()
    if len(names) < 2:
        return SafeString("")
    current = shards.current()
    options = format_html_join(
        "", '<option value="{}"{}>{}</option>', ((name, " selected" if name == current else "", name) for name in names)
    )
    return format_html(
        '<form class="shard" method="get" action=""><select name="shard" aria-label="Redis shard">{}</select><button>Show</button></form>',
        options,
    )
