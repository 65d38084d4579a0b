"""The tracking API (docs/tracking-api.md) and the progress page. Thin: read rows, shape them.

Every query is scoped to the caller (``tracking.permissions.visible_tasks``: their own tasks, plus
ownerless ones for staff), so another user's task or event answers 404 exactly as a missing one.
Anonymous callers are refused whatever the project's DRF default permission is. The task summary
is one statement of fixed text: the task row with its few counter shards summed and, on
PostgreSQL, the running jobs' messages when its progress needs their fractions
(``tracking.summary``); it carries an ETag built from the task's
``revision`` and the shards' change count, and a repeated ``If-None-Match`` gets 304 while nothing
changed. ``POST /api/tasks/<id>/cancel/`` cancels the task (``tracking.launching.cancel``), with
the same scoping (another user's task: 404) and DRF's CSRF check for session callers.
``?running=1`` (the progress page's poll) adds the running jobs' latest messages and
reported fractions: one more query on the ``(task, status)`` index, at most RUNNING_SHOWN rows.
Event lists are filtered by ``?status=failed`` (or ``failed,error``) on the ``(task, status,
id)`` index and paginated by keyset (``EventPagination``): a page is the next rows after an id
on that index, and its ``count`` comes from the task's counters, so any page of a task of
100,000 jobs costs what the first one does (``?page=N`` still works, by OFFSET). All endpoints
share one throttle scope, ``TRACKING["API_THROTTLE_RATE"]``.
"""

from __future__ import annotations

import re
from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination, PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import UserRateThrottle

from jobsapp.login import to_login

from . import launching, summary
from .conf import tracking_settings
from .models import Event, EventStatus, Task, reported_fraction
from .permissions import TrackingAccess, visible_tasks
from .serializers import EventSerializer, TaskSerializer

#: What a task id or a job id can look like; anything else is a 404 without a query (so a NUL
#: byte or a megabyte of text never reaches the database).
PLAUSIBLE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def plausible_id(value: str) -> bool:
    return PLAUSIBLE_ID.fullmatch(value) is not None


class TrackingThrottle(UserRateThrottle):
    """One rate for every tracking endpoint, read from settings on each request."""

    scope = "tracking"

    def get_rate(self) -> str | None:
        return tracking_settings.API_THROTTLE_RATE


class TrackingPagination(PageNumberPagination):
    page_size_query_param = "page_size"

    def get_page_size(self, request: Any) -> int | None:
        self.page_size = tracking_settings.API_PAGE_SIZE
        self.max_page_size = tracking_settings.API_MAX_PAGE_SIZE
        return super().get_page_size(request)


class EventPagination(CursorPagination):
    """A task's events, oldest first, by keyset: ``next`` and ``previous`` carry an opaque
    ``cursor`` (a position in event id order), so a page is one indexed range read however deep
    it is. The answer keeps the shape of the other lists, ``{"count", "next", "previous",
    "results"}``: ``count`` is what the task's counters say (``Task.event_count``), not a COUNT over
    its events. ``?page=N`` (the numbered pages this list had) is still answered, by OFFSET."""

    ordering = "id"
    page_size_query_param = "page_size"

    def __init__(self) -> None:
        super().__init__()
        self.numbered: TrackingPagination | None = None
        self.count = 0

    def get_page_size(self, request: Any) -> int | None:
        self.page_size = tracking_settings.API_PAGE_SIZE
        self.max_page_size = tracking_settings.API_MAX_PAGE_SIZE
        return super().get_page_size(request)

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> list[Any] | None:
        if "page" in request.query_params:
            self.numbered = TrackingPagination()
            return self.numbered.paginate_queryset(queryset, request, view)
        return super().paginate_queryset(queryset, request, view)

    def get_paginated_response(self, data: Any) -> Response:
        if self.numbered is not None:
            return self.numbered.get_paginated_response(data)
        return Response({"count": self.count, "next": self.get_next_link(), "previous": self.get_previous_link(), "results": data})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        response = super().get_paginated_response_schema(schema)
        response["properties"] = {"count": {"type": "integer"}, **response["properties"]}
        return response


STATUS_PARAMETER = OpenApiParameter(
    "status",
    OpenApiTypes.STR,
    description="Only events in these statuses, comma-separated: " + ", ".join(EventStatus.values),
)


def parse_statuses(raw: str | None) -> list[str]:
    """``?status=failed,error`` -> ["failed", "error"]; 400 for a status that does not exist."""
    if not raw:
        return []
    wanted = [part.strip() for part in raw.split(",") if part.strip()]
    unknown = [part for part in wanted if part not in EventStatus.values]
    if unknown:
        raise ValidationError({"status": f"unknown status {unknown[0]!r}; one of {', '.join(EventStatus.values)}"})
    return wanted


def _who(request: Any) -> str:
    """How a cancel's message names the caller."""
    user = getattr(request, "user", None)
    name = user.get_username() if user is not None and user.is_authenticated else ""
    return f"user {name}" if name else "an operator"


class OwnedTasks:
    """The caller's tasks only (and ownerless ones for staff); a lookup of anything else is a 404."""

    request: Any  # DRF's Request on the viewsets that mix this in

    def owned_tasks(self) -> Any:
        return Task.objects.filter(visible_tasks(self.request.user))


#: The running jobs ``?running=1`` lists (the most recently updated first).
RUNNING_SHOWN = 50

RUNNING_PARAMETER = OpenApiParameter(
    "running",
    OpenApiTypes.BOOL,
    description="Also list the running jobs' latest messages and reported fractions (one more indexed query): "
    '"running": [{"job_id", "message", "fraction"}], "running_progress" (their fractions summed, in jobs).',
)


def running_summary(task: Task) -> dict[str, Any]:
    """The running jobs of ``task`` (at most RUNNING_SHOWN): latest message, reported fraction."""
    rows = (
        Event.objects.filter(task_id=task.pk, status=EventStatus.WORKING)
        .order_by("-updated_at")
        .values_list("job_id", "messages")[:RUNNING_SHOWN]
    )
    running: list[dict[str, Any]] = []
    total_fraction = 0.0
    for job_id, messages in rows:
        entries = list(messages or [])
        fraction = next((value for value in map(reported_fraction, reversed(entries)) if value is not None), None)
        total_fraction += fraction or 0.0
        running.append({"job_id": job_id, "message": str(entries[-1].get("message", "")) if entries else "", "fraction": fraction})
    return {"running": running, "running_progress": round(total_fraction, 4)}


@extend_schema(tags=["tracking"])
class TaskViewSet(OwnedTasks, viewsets.ReadOnlyModelViewSet):
    """The caller's tasks, newest first; one task's summary; its events."""

    serializer_class = TaskSerializer
    pagination_class = TrackingPagination
    permission_classes = [TrackingAccess]
    throttle_classes = [TrackingThrottle]
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Task]:
        return self.owned_tasks().with_counts().order_by("-created_at", "-pk")

    def get_object(self) -> Task:
        task_id = self.kwargs["pk"]
        if not plausible_id(task_id):
            raise Http404
        task = self.owned_tasks().with_counts().filter(pk=task_id).first()
        if task is None:
            raise Http404
        return task

    @extend_schema(
        responses={200: TaskSerializer, 304: OpenApiResponse(description="Not modified since the ETag given")},
        parameters=[OpenApiParameter("If-None-Match", OpenApiTypes.STR, OpenApiParameter.HEADER), RUNNING_PARAMETER],
    )
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        task_id = self.kwargs["pk"]
        task = summary.read(task_id, request.user) if plausible_id(task_id) else None  # one statement
        if task is None:
            raise Http404
        with_running = request.query_params.get("running") in ("1", "true")
        etag = task.etag if not with_running else task.etag[:-1] + '.running"'
        headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
        candidates = {tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")}
        if etag in candidates or "*" in candidates:
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers=headers)
        data = self.get_serializer(task).data
        if with_running:
            data.update(running_summary(task))
        return Response(data, headers=headers)

    @extend_schema(
        request=None,
        responses={
            200: OpenApiResponse(
                TaskSerializer,
                description="The task's summary, status cancelled: its waiting jobs were removed, its running ones are being "
                "stopped (within a second). Idempotent: cancelling a cancelled task answers the same.",
            ),
            404: OpenApiResponse(description="No such task, or not the caller's"),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel the task: no job joins it any more, each job not settled yet is cancelled
        (removed while it waits, stopped while it runs); the summary says ``cancelled``."""
        task = self.get_object()
        launching.cancel(task, by=_who(request))
        return Response(self.get_serializer(self.get_object()).data)

    @extend_schema(parameters=[STATUS_PARAMETER], responses=EventSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=EventPagination)
    def events(self, request: Request, pk: str | None = None) -> Response:
        """The task's events, oldest first, optionally only some statuses."""
        statuses = parse_statuses(request.query_params.get("status"))
        task = self.get_object()
        events = Event.objects.filter(task_id=task.pk).order_by("id")
        if statuses:
            events = events.filter(status__in=statuses)
        paginator = self.paginator
        if isinstance(paginator, EventPagination):
            paginator.count = task.event_count(statuses)
        page = self.paginate_queryset(events)
        return self.get_paginated_response(EventSerializer(page, many=True, context=self.get_serializer_context()).data)


@extend_schema(tags=["tracking"])
class EventViewSet(mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """One event by its job id, if its task is the caller's."""

    serializer_class = EventSerializer
    permission_classes = [TrackingAccess]
    throttle_classes = [TrackingThrottle]
    lookup_field = "job_id"
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[Event]:
        return Event.objects.filter(visible_tasks(self.request.user, through="task__"))

    def get_object(self) -> Event:
        job_id = self.kwargs["job_id"]
        if not plausible_id(job_id):
            raise Http404
        event = self.get_queryset().filter(job_id=job_id).first()
        if event is None:
            raise Http404
        return event


def task_page(request: HttpRequest, task_id: str) -> HttpResponse:
    """The progress page: HTML that polls the API; 404 unless the task is the caller's.
    Anonymous visitors go to a login page that exists (``jobsapp.login.login_url``)."""
    if not request.user.is_authenticated:
        return to_login(request)
    if not plausible_id(task_id) or not Task.objects.filter(visible_tasks(request.user), pk=task_id).exists():
        raise Http404("No such task.")
    context = {
        "task_id": task_id,
        "summary_url": reverse("tracking:task-detail", kwargs={"pk": task_id}),
        "events_url": reverse("tracking:task-events", kwargs={"pk": task_id}),
        "cancel_url": reverse("tracking:task-cancel", kwargs={"pk": task_id}),
        "poll_interval_milliseconds": tracking_settings.PAGE_POLL_INTERVAL_MILLISECONDS,
    }
    return render(request, "tracking/task_progress.html", context)
