"""Admin for tasks and events: counts and a progress bar per task, a task's failed and errored
jobs inline, and an action that retries a task's errored jobs through the engine's client."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from jobsapp import RedisUnavailable
from jobsapp.api import redact

from .launching import cancel, retry_errored
from .models import Event, EventStatus, Task


class TaskStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("launching", "launching"),
            ("pending", "pending"),
            ("running", "running"),
            ("finished", "finished"),
            ("cancelled", "cancelled"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Task]) -> QuerySet[Task]:
        value = self.value()
        if value == "cancelled":
            return queryset.filter(cancelled_at__isnull=False)
        queryset = queryset.filter(cancelled_at__isnull=True) if value else queryset
        if value == "finished":
            return queryset.filter(finished_at__isnull=False)
        if value == "launching":
            return queryset.filter(finished_at__isnull=True, launching__gt=0)
        if value == "running":
            return queryset.filter(finished_at__isnull=True, launching=0, started_at__isnull=False)
        if value == "pending":
            return queryset.filter(finished_at__isnull=True, launching=0, started_at__isnull=True)
        return queryset


def render_messages(event: Event) -> str:
    return format_html(
        "<ul style='margin:0;padding-left:1em'>{}</ul>",
        format_html_join(
            "",
            "<li><small>{} · {}</small> {}</li>",
            ((entry.get("at", ""), entry.get("status", ""), entry.get("message", "")) for entry in event.messages or []),
        ),
    )


class ProblemEventInline(admin.TabularInline):
    """The task's failed and errored events (the ones someone needs to look at)."""

    model = Event
    verbose_name = "failed or errored job"
    verbose_name_plural = "failed and errored jobs"
    fields = ("job_id", "status", "is_final", "attempts", "params_json", "message_list", "updated_at")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True

    def get_queryset(self, request: HttpRequest) -> QuerySet[Event]:
        return super().get_queryset(request).filter(status__in=[EventStatus.FAILED, EventStatus.ERROR])

    @admin.display(description="params")
    def params_json(self, event: Event) -> str:
        return format_html("<pre>{}</pre>", json.dumps(redact(event.params), ensure_ascii=False))

    @admin.display(description="messages")
    def message_list(self, event: Event) -> str:
        return render_messages(event)


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    # Fits a 1280 px screen beside the admin's navigation and filter columns: the id shortened
    # (the full one is its link and tooltip), the owner under the name, the status over the bar,
    # the five counts in one stacked column (tests/tracking/test_admin.py measures it in Chromium).
    list_display = ["short_id", "task_and_owner", "status_and_progress", "jobs_summary", "created"]
    list_display_links = ["short_id"]
    list_filter = [TaskStatusFilter, "owner", "created_at"]
    search_fields = ["=id", "name"]
    list_select_related = ["owner"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "id", "name", "owner", "status_label", "progress_bar", "events_link", "total", "launching", "enqueue_count", "working_count",
        "finish_count", "failed_count", "error_count", "cancelled_count", "settled_count", "then_class", "then_args", "then_queued",
        "on_complete_class", "complete_fired", "on_success_class", "success_fired",
        "created_at", "updated_at", "started_at", "finished_at", "cancelled_at",
    ]  # fmt: skip
    exclude = ["revision"]
    inlines = [ProblemEventInline]
    actions = ["retry_errored_jobs", "cancel_tasks"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Task]:
        return super().get_queryset(request).with_counts()  # type: ignore[attr-defined]

    @admin.display(description="id", ordering="id")
    def short_id(self, task: Task) -> str:
        return format_html("<span title='{}'>{}…</span>", task.pk, str(task.pk)[:8])

    @admin.display(description="created", ordering="created_at")
    def created(self, task: Task) -> str:
        return format_html("{}<br>{}", *timezone.localtime(task.created_at).strftime("%Y-%m-%d %H:%M:%S").split(" "))

    @admin.display(description="task", ordering="name")
    def task_and_owner(self, task: Task) -> str:
        return format_html("{}<br><small>{}</small>", task.name, task.owner if task.owner_id else "no owner")

    @admin.display(description="status")
    def status_and_progress(self, task: Task) -> str:
        return format_html("{}<br>{}", task.status, self.progress_bar(task))

    @admin.display(description="jobs")
    def jobs_summary(self, task: Task) -> str:
        counts = task.counts
        problems = counts["failed"] + counts["error"]
        return format_html(
            "<span style='white-space:nowrap'>{} / {} settled</span><br>"
            "<small style='white-space:nowrap'>{} waiting · {} working</small><br>"
            "<small style='white-space:nowrap'>{} done · <span style='color:{}'>{} failed · {} errors</span>{}</small>",
            f"{task.settled_count:,}", f"{task.total:,}", f"{counts['enqueue']:,}", f"{counts['working']:,}", f"{counts['finish']:,}",
            "#d9822b" if problems else "inherit", f"{counts['failed']:,}", f"{counts['error']:,}",
            f" · {counts['cancelled']:,} cancelled" if counts["cancelled"] else "",
        )  # fmt: skip

    @admin.display(description="enqueue")
    def enqueue_count(self, task: Task) -> int:
        return task.counts["enqueue"]

    @admin.display(description="working")
    def working_count(self, task: Task) -> int:
        return task.counts["working"]

    @admin.display(description="finish")
    def finish_count(self, task: Task) -> int:
        return task.counts["finish"]

    @admin.display(description="failed")
    def failed_count(self, task: Task) -> int:
        return task.counts["failed"]

    @admin.display(description="error")
    def error_count(self, task: Task) -> int:
        return task.counts["error"]

    @admin.display(description="cancelled")
    def cancelled_count(self, task: Task) -> int:
        return task.counts["cancelled"]

    @admin.display(description="settled")
    def settled_count(self, task: Task) -> int:
        return task.settled_count

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="events")
    def events_link(self, task: Task) -> str:
        url = reverse("admin:tracking_event_changelist") + f"?task__id__exact={task.pk}"
        return format_html("<a href='{}'>{} events</a>", url, f"{task.event_count():,}")

    @admin.display(description="status")
    def status_label(self, task: Task) -> str:
        return str(task.status)

    @admin.display(description="progress")
    def progress_bar(self, task: Task) -> str:
        percent = round(task.progress * 100, 1)
        failed = task.counts["failed"] + task.counts["error"]
        return format_html(
            "<div title='{}% settled, {} failed or errored' style='width:6em;height:.9em;background:#eee;"
            "border-radius:3px;overflow:hidden'><div style='width:{}%;height:100%;background:{}'></div></div>",
            percent, failed, percent, "#d9822b" if failed else "#3a7bd5",
        )  # fmt: skip

    @admin.action(description="Retry the errored jobs of the selected tasks", permissions=["change"])
    def retry_errored_jobs(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        retried = 0
        try:
            for task in queryset:
                retried += retry_errored(task, by=str(request.user))
        except RedisUnavailable as exc:
            self.message_user(request, f"Redis is unavailable, jobs not retried: {exc}", messages.ERROR)
            return
        self.message_user(request, f"Retried {retried} errored job(s).", messages.SUCCESS)

    @admin.action(description="Cancel the selected tasks (remove their waiting jobs, stop their running ones)", permissions=["change"])
    def cancel_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        removed = stopping = cancelled = 0
        try:
            for task in queryset:
                outcome = cancel(task, by=str(request.user))
                cancelled += outcome.first
                removed += outcome.removed + outcome.settled_here
                stopping += outcome.cancelling
        except RedisUnavailable as exc:
            self.message_user(request, f"Redis is unavailable, the tasks' jobs were not all cancelled: {exc}", messages.ERROR)
            return
        text = f"Cancelled {cancelled} task(s): {removed} waiting job(s) removed, {stopping} running job(s) being stopped."
        self.message_user(request, text, messages.SUCCESS)


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["job_id", "task", "job_class", "status", "is_final", "attempts", "last_message", "updated_at"]
    # No filter listing the tasks (it read every event's task); a task's page links to its events
    # (?task__id__exact=), and the search finds a task's id. Counts come from the task's counters
    # on that list (get_paginator) and the unfiltered total is not counted: one task's event list
    # costs the same at 100 events and at 100,000.
    list_filter = ["status", "is_final"]
    search_fields = ["=job_id", "=task__id"]
    list_select_related = ["task"]
    show_full_result_count = False
    readonly_fields = [
        "job_id", "task", "job_class", "queue", "status", "is_final", "params_json", "message_list", "attempts",
        "created_at", "updated_at",
    ]  # fmt: skip
    exclude = ["params", "messages", "revision"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_paginator(
        self, request: HttpRequest, queryset: Any, per_page: int, orphans: int = 0, allow_empty_first_page: bool = True
    ) -> Paginator:
        """The list of one task's events (optionally of one status) counts them from the task's
        counters instead of a COUNT over its events."""
        paginator = super().get_paginator(request, queryset, per_page, orphans, allow_empty_first_page)
        task_id = request.GET.get("task__id__exact")
        if task_id and not set(request.GET) - {"task__id__exact", "status__exact", "p", "o"}:
            task = Task.objects.with_counts().filter(pk=task_id).first()
            status = request.GET.get("status__exact")
            if task is not None and (status is None or status in EventStatus.values):
                paginator.count = task.event_count([status] if status else [])
        return paginator

    @admin.display(description="last message")
    def last_message(self, event: Event) -> str:
        return event.messages[-1]["message"] if event.messages else ""

    @admin.display(description="params")
    def params_json(self, event: Event) -> str:
        return format_html("<pre>{}</pre>", json.dumps(redact(event.params), indent=2, ensure_ascii=False))

    @admin.display(description="messages")
    def message_list(self, event: Event) -> str:
        return render_messages(event)
