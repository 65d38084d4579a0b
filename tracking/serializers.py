"""The JSON shapes of shared/DESIGN.md §5: a task summary and an event. Read-only."""

from __future__ import annotations

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


class TaskSerializer(serializers.ModelSerializer):
    """A task summary, built from the task row and its summed counter shards (no event is read)."""

    status = serializers.ChoiceField(choices=TaskStatus.choices, read_only=True)
    counts = serializers.SerializerMethodField()
    progress = serializers.FloatField(read_only=True, help_text="Settled share of the jobs, 0.0 to 1.0.")
    updated_at = serializers.DateTimeField(source="last_updated_at", read_only=True)

    class Meta:
        model = Task
        fields = ["id", "name", "status", "total", "counts", "progress", "created_at", "updated_at", "finished_at"]
        read_only_fields = fields

    @extend_schema_field(CountsSerializer)
    def get_counts(self, task: Task) -> dict[str, int]:
        return task.counts


class MessageSerializer(serializers.Serializer):
    at = serializers.CharField(help_text="ISO 8601 time")
    status = serializers.CharField()
    message = serializers.CharField()


class EventSerializer(serializers.ModelSerializer):
    messages = MessageSerializer(many=True, read_only=True)
    params = serializers.JSONField(read_only=True, help_text='{"args": [...], "kwargs": {...}}')

    class Meta:
        model = Event
        fields = ["job_id", "status", "params", "messages", "attempts", "updated_at"]
        read_only_fields = fields

    def to_representation(self, instance: Event) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["messages"] = list(instance.messages or [])
        data["params"] = redact(instance.params)  # secret-looking keys (JOBSAPP["REDACT_KEYS"])
        return data
