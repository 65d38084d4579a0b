"""The JSON shapes of docs/tracking-api.md: a task summary and an event. Read-only."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobsapp.api import redact

from .models import Event, Task, TaskStatus


class CountsSerializer(serializers.Serializer):
    enqueue = serializers.IntegerField()
    working = serializers.IntegerField()
    finish = serializers.IntegerField()
    failed = serializers.IntegerField()
    error = serializers.IntegerField()
    cancelled = serializers.IntegerField()


class TaskSerializer(serializers.ModelSerializer):
    """A task summary, built from the task row and its summed counter shards (no event is read)."""

    status = serializers.ChoiceField(choices=TaskStatus.choices, read_only=True)
    counts = serializers.SerializerMethodField()
    progress = serializers.FloatField(read_only=True, help_text="Settled share of the jobs, 0.0 to 1.0.")
    updated_at = serializers.DateTimeField(source="last_updated_at", read_only=True)

    class Meta:
        model = Task
        fields = ["id", "name", "status", "total", "counts", "progress", "created_at", "updated_at", "finished_at", "cancelled_at"]
        read_only_fields = fields

    @extend_schema_field(CountsSerializer)
    def get_counts(self, task: Task) -> dict[str, int]:
        return task.counts


#: What the API shows of a message (stored entries may carry more: report_progress's fraction).
MESSAGE_FIELDS = ("at", "status", "message")


class MessageSerializer(serializers.Serializer):
    at = serializers.CharField(help_text="ISO 8601 time")
    status = serializers.CharField()
    message = serializers.CharField()


#: "ValueError: <text>" as the tracking middleware records a crash, and "<reason> (ValueError: <text>)"
#: for a job that will not run again.
_CRASH = re.compile(r"^(?P<cls>[A-Za-z_]\w*)(?:: .*)?$", re.DOTALL)
_DEAD_WITH_CRASH = re.compile(r"^(?P<head>.*?) \((?P<cls>[A-Za-z_]\w*)(?:: .*)?\)$", re.DOTALL)


def crash_summary(text: str) -> str:
    """A crash message cut to its exception class: a crash's text can carry what its owner must not
    see (a DSN, a token in a URL), while business failures ("failed") are written for users."""
    match = _DEAD_WITH_CRASH.match(text)
    if match:
        return f"{match['head']} ({match['cls']})"
    match = _CRASH.match(text)
    return match["cls"] if match else text


class EventSerializer(serializers.ModelSerializer):
    messages = MessageSerializer(many=True, read_only=True)
    params = serializers.JSONField(read_only=True, help_text='{"args": [...], "kwargs": {...}}')

    class Meta:
        model = Event
        fields = ["job_id", "status", "params", "messages", "attempts", "updated_at"]
        read_only_fields = fields

    def to_representation(self, instance: Event) -> dict[str, Any]:
        data = super().to_representation(instance)
        messages = list(instance.messages or [])
        request = self.context.get("request")
        if not (request is not None and request.user.is_staff):
            # crashes are shown to the task's owner by exception class only; staff see the text
            messages = [
                {**entry, "message": crash_summary(str(entry.get("message", "")))} if entry.get("status") == "error" else entry
                for entry in messages
            ]
        data["messages"] = [{key: entry.get(key) for key in MESSAGE_FIELDS} for entry in messages]
        data["params"] = redact(instance.params)  # secret-looking keys (JOBSAPP["REDACT_KEYS"])
        return data
