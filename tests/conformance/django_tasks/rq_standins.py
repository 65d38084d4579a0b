"""What django-tasks-rq's tests reach of RQ and django-rq, stood in by JobsBackend on the test Redis.

The port (port.py) imports this module where upstream imports ``django_rq`` and RQ: ``get_queue``
reads a queue's job ids from Redis (RQ's ``Queue.job_ids``), ``enqueue_call`` pushes a plain job
that is no task (RQ's ``Queue.enqueue_call``), and ``RQBackend`` is the JobsBackend that records
what it enqueued, so the port's burst worker knows what to wait for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from jobsapp import client, keys
from jobsapp.connection import get_redis
from tests.conformance.django_tasks.backends import RecordingBackend

RQBackend = RecordingBackend
QUEUES = ["default", "queue-1"]
#: The backend as django-tasks-rq's test settings configure it, on RQ_QUEUES "default" and "queue-1".
TASKS = {"default": {"BACKEND": "tests.conformance.django_tasks.backends.RecordingBackend", "QUEUES": QUEUES}}


def jobsapp_settings() -> dict[str, Any]:
    """JOBSAPP with the queues RQ_QUEUES lists upstream (what the backend's queue check reads)."""
    return {**settings.JOBSAPP, "QUEUES": QUEUES}


class Job:
    """RQ's job class, which upstream passes to ``get_queue``; nothing here reads it."""


@dataclass(frozen=True)
class Queue:
    name: str

    @property
    def job_ids(self) -> list[str]:
        """The ids waiting in the queue, oldest first."""
        return [json.loads(item)["jid"] for item in reversed(get_redis().lrange(keys.queue(self.name), 0, -1))]

    def enqueue_call(self, func: str, args: list[Any]) -> Queue.Pushed:
        """Push a retained job of class ``func`` that is no task, on a queue no worker here runs."""
        return Queue.Pushed(client.push({"class": func, "args": args, "queue": "elsewhere", "retain": 60}))

    @dataclass(frozen=True)
    class Pushed:
        id: str


def get_queue(name: str, job_class: type | None = None) -> Queue:
    return Queue(name)
