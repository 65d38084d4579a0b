"""The dashboard's pages (GET only): overview, queues, one queue, busy, the three job sets, one job,
and the JSON the overview polls.

Each view reads through ``jobsapp.api`` and hands plain objects to a template; nothing here
writes to Redis. Untrusted query parameters (page, page size, filters, days) are clamped or
ignored, never passed to Redis unchecked.
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET

from .. import api
from ..api.batches import FAILED_JIDS_SHOWN, PENDING_SCAN_BUDGET
from .access import staff_view

HISTORY_DAYS = (7, 30, 90, 180)
PER_PAGE_CHOICES = (25, 50, 100)
POLL_INTERVAL_SECONDS = 5
POLL_CHOICES = (1, 2, 5, 10, 30)
FILTER_MAX_CHARS = 200
UNIQUE_LOCKS_SHOWN = 200  # the Limits page lists at most this many unique-job locks

SET_PAGES: dict[str, dict[str, Any]] = {
    "scheduled": {"title": "Scheduled", "set": api.ScheduledSet, "when": "Run at"},
    "retries": {"title": "Retries", "set": api.RetrySet, "when": "Next retry"},
    "dead": {"title": "Dead", "set": api.DeadSet, "when": "Died"},
}


def _choice(value: str | None, choices: tuple[int, ...], default: int) -> int:
    try:
        number = int(value or default)
    except ValueError:
        return default
    return number if number in choices else default


def _page_number(request: HttpRequest) -> int:
    """The ``page`` query parameter as a number >= 1 (anything else is page 1)."""
    try:
        number = int(request.GET.get("page", "1"))
    except ValueError:
        return 1
    return max(number, 1)


def _rank(request: HttpRequest) -> int:
    """The ``from`` query parameter (where a filtered listing continues) as a rank >= 0."""
    try:
        return min(max(int(request.GET.get("from", "0")), 0), 10**12)
    except ValueError:
        return 0


def _filter(request: HttpRequest, name: str) -> str:
    return request.GET.get(name, "").strip()[:FILTER_MAX_CHARS]


def stats_payload(stats: api.Stats) -> dict[str, Any]:
    """The counters as JSON-ready data, for the overview's first render and its polling."""
    return {
        "processed": stats.processed,
        "failed": stats.failed,
        "expired": stats.expired,
        "busy": stats.busy,
        "processes": stats.processes_size,
        "enqueued": stats.enqueued,
        "scheduled": stats.scheduled_size,
        "retries": stats.retry_size,
        "dead": stats.dead_size,
        "default_queue_latency": round(stats.default_queue_latency, 3),
        "queues": [
            {
                "name": queue.name,
                "size": queue.size,
                "latency": round(queue.latency_seconds, 3),
                "paused": queue.paused,
            }
            for queue in stats.queues
        ],
        "time": stats.taken_at,
    }


@staff_view
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    stats = api.Stats.fetch()
    days = _choice(request.GET.get("days"), HISTORY_DAYS, 30)
    history = api.Stats.history(days)
    series = [[day, history.processed[day], history.failed[day]] for day in reversed(list(history.processed))]
    return TemplateResponse(
        request,
        "jobsapp/overview.html",
        {
            "section": "overview",
            "stats": stats,
            "days": days,
            "history_days": HISTORY_DAYS,
            "history_series": series,
            "initial_stats": stats_payload(stats),
            "redis_info": api.redis_info(),
            "partitions": api.partitions(),
            "outbox": api.Outbox.state(),
            "outbox_parked": api.Outbox.parked(),
            "poll_interval_seconds": _choice(request.GET.get("poll"), POLL_CHOICES, POLL_INTERVAL_SECONDS),
        },
    )


@staff_view(as_json=True)
@require_GET
def stats_json(request: HttpRequest) -> HttpResponse:
    return JsonResponse(stats_payload(api.Stats.fetch()))


@staff_view
@require_GET
def queues(request: HttpRequest) -> HttpResponse:
    return TemplateResponse(request, "jobsapp/queues.html", {"section": "queues", "queues": api.Queue.summaries()})


@staff_view
@require_GET
def queue(request: HttpRequest, name: str) -> HttpResponse:
    selected = api.Queue(name)
    per_page = _choice(request.GET.get("per_page"), PER_PAGE_CHOICES, 25)
    page = selected.page(_page_number(request), per_page)
    return TemplateResponse(
        request,
        "jobsapp/queue.html",
        {
            "section": "queues",
            "queue": selected,
            "page": page,
            "paused": selected.is_paused(),
            "latency": selected.latency(),
        },
    )


@staff_view
@require_GET
def busy(request: HttpRequest) -> HttpResponse:
    processes = api.ProcessSet.all()
    now = time.time()
    return TemplateResponse(
        request,
        "jobsapp/busy.html",
        {
            "section": "busy",
            "processes": processes,
            # (work, seconds running, past its timeout): the elapsed time and a timeout overrun
            "work": [(work, work.elapsed_seconds(now=now), work.overrunning(now=now)) for work in api.WorkSet.all()],
            "threads": sum(process.concurrency for process in processes),
            "busy_threads": sum(process.busy for process in processes),
            "rss_kb": sum(process.rss_kb for process in processes),
        },
    )


@staff_view
@require_GET
def job_set(request: HttpRequest, slug: str) -> HttpResponse:
    if slug not in SET_PAGES:
        raise Http404("no such job set")
    config = SET_PAGES[slug]
    selected: api.JobSet = config["set"]()
    class_name, substring = _filter(request, "class"), _filter(request, "q")
    per_page = _choice(request.GET.get("per_page"), PER_PAGE_CHOICES, 25)
    search: api.SearchPage | None = None
    if class_name or substring:
        # bounded: one window of the set per request, with a "more" link to the next one
        search = selected.search(class_name=class_name, substring=substring, start_rank=_rank(request), limit=per_page)
        page = api.Page(search.entries, len(search.entries), 1, per_page)
    else:
        page = selected.page(_page_number(request), per_page)
    more_url = None
    if search is not None and search.next_rank is not None:
        query = request.GET.copy()
        query["from"] = str(search.next_rank)
        more_url = "?" + query.urlencode()
    return TemplateResponse(
        request,
        "jobsapp/job_set.html",
        {
            "section": slug,
            "slug": slug,
            "title": config["title"],
            "when_label": config["when"],
            "job_set": selected,
            "page": page,
            "class_filter": class_name,
            "substring": substring,
            "filtered": bool(class_name or substring),
            "search": search,
            "more_url": more_url,
            "has_errors": slug != "scheduled",
        },
    )


@staff_view
@require_GET
def periodic(request: HttpRequest) -> HttpResponse:
    return TemplateResponse(request, "jobsapp/periodic.html", {"section": "periodic", "jobs": api.PeriodicSet.all()})


@staff_view
@require_GET
def batches(request: HttpRequest) -> HttpResponse:
    """Redis-only batches (jobsapp.batch), newest first, with their counts and callbacks."""
    per_page = _choice(request.GET.get("per_page"), PER_PAGE_CHOICES, 25)
    return TemplateResponse(
        request, "jobsapp/batches.html", {"section": "batches", "page": api.BatchSet.page(_page_number(request), per_page)}
    )


@staff_view
@require_GET
def batch(request: HttpRequest, bid: str) -> HttpResponse:
    """One batch: its counts, its callbacks' state, its failed jids and the pending jobs found."""
    detail = api.BatchSet.get(bid[:FILTER_MAX_CHARS])
    if detail is None:
        raise Http404("no such batch (unknown, or expired)")
    context = {
        "section": "batches",
        "batch": detail,
        "pending_budget": PENDING_SCAN_BUDGET,
        "failed_shown": FAILED_JIDS_SHOWN,
    }
    return TemplateResponse(request, "jobsapp/batch.html", context)


@staff_view
@require_GET
def limits(request: HttpRequest) -> HttpResponse:
    context = {
        "section": "limits",
        "limiters": api.LimiterSet.all(),
        "unique_locks": api.UniqueLocks.all(limit=UNIQUE_LOCKS_SHOWN),
        "unique_locks_shown": UNIQUE_LOCKS_SHOWN,
    }
    return TemplateResponse(request, "jobsapp/limits.html", context)


@staff_view
@require_GET
def job(request: HttpRequest, jid: str) -> HttpResponse:
    location = api.find_job(jid)
    result = api.CompletedSet.get(jid)  # kept only for jobs pushed with retain
    if location is None:
        context = {"section": "completed" if result else "", "jid": jid, "location": None, **_result_context(result)}
        return TemplateResponse(request, "jobsapp/job.html", context, status=200 if result else 404)
    slug = {"scheduled": "scheduled", "retry": "retries", "dead": "dead"}.get(location.kind)
    return TemplateResponse(
        request,
        "jobsapp/job.html",
        {
            "section": slug or ("busy" if location.kind == "running" else "queues"),
            "jid": jid,
            "location": location,
            "record": location.record,
            "slug": slug,
            "item_json": _pretty(location.record.display_item),
            **_result_context(result),
        },
    )


def _pretty(item: dict[str, Any]) -> str:
    return json.dumps(item, indent=2, ensure_ascii=False, sort_keys=True, default=str)


COMPLETED_STATUSES = ("succeeded", "failed")


@staff_view
@require_GET
def completed(request: HttpRequest) -> HttpResponse:
    """Finished jobs pushed with ``sidekiq_options(retain=seconds)``, while their results are kept."""
    status = request.GET.get("status", "")
    status = status if status in COMPLETED_STATUSES else ""
    per_page = _choice(request.GET.get("per_page"), PER_PAGE_CHOICES, 25)
    page = api.CompletedSet().page(request.GET.get("page", 1), per_page, status=status or None)
    rows = [
        {
            "result": result,
            "args_preview": _preview(api.redact(result.args) + ([api.redact(result.kwargs)] if result.kwargs else [])),
            "value_preview": _preview(result.value) if result.has_value else "",
            "duration_seconds": (result.finished_at - result.started_at) if result.finished_at and result.started_at else None,
        }
        for result in page.entries
    ]
    return TemplateResponse(
        request,
        "jobsapp/completed.html",
        {"section": "completed", "page": page, "rows": rows, "status": status, "statuses": COMPLETED_STATUSES},
    )


PREVIEW_MAX_CHARS = 200


def _preview(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= PREVIEW_MAX_CHARS else text[: PREVIEW_MAX_CHARS - 1] + "…"


def _result_context(result: Any) -> dict[str, Any]:
    """What ``_result.html`` shows of a retained job's record (nothing without one)."""
    if result is None:
        return {"result": None}
    return {
        "result": result,
        "result_value": _pretty(result.value) if result.has_value else "",
        "result_args": _preview(api.redact(result.args) + ([api.redact(result.kwargs)] if result.kwargs else [])),
    }
