"""A URLconf with one view that enqueues a job, for the Redis-down test (the project's own views
only read): RedisUnavailable raised in a user's view must become a 503, not a 500."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from tests.testapp.jobs import Noop


@csrf_exempt
def enqueue(request: HttpRequest) -> HttpResponse:
    return HttpResponse(Noop.perform_async() or "")


urlpatterns = [path("enqueue/", enqueue)]
