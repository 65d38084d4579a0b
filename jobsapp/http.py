"""``RedisUnavailableMiddleware``: Redis down answers 503 with a reason, never a 500 page.

A Django middleware for any project using jobsapp (the demo project installs it). A view that
enqueues while Redis is down raises ``jobsapp.RedisUnavailable``; a view that touches a Redis-backed
cache (DRF throttling, django-redis sessions) raises redis-py's connection errors or django-redis's
``ConnectionInterrupted``. Each becomes a 503 with ``Retry-After``: JSON
(``{"error": "redis_unavailable", "detail": ...}``) when the client asked for JSON or the path is
under ``/api/``, plain text otherwise. The detail is "Redis is unavailable" for anyone; staff also
read the address (credentials removed) and the driver's message. Nothing was written by the failed request (pushes are
validated and prepared before any write), so the client may simply retry. Other exceptions pass
through untouched.

    MIDDLEWARE = [..., "jobsapp.http.RedisUnavailableMiddleware"]
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from .connection import CONNECTION_ERRORS
from .errors import RedisUnavailable

logger = logging.getLogger("jobsapp.http")

#: Exceptions that mean "Redis did not answer", as they reach a view.
REDIS_DOWN_ERRORS: tuple[type[BaseException], ...] = (RedisUnavailable, *CONNECTION_ERRORS)
try:  # django-redis is optional (the jobsapp[django-redis] extra); its error counts when present
    from django_redis.exceptions import ConnectionInterrupted
except ImportError:  # pragma: no cover - exercised by the install-from-wheel test without the extra
    pass
else:
    REDIS_DOWN_ERRORS = (*REDIS_DOWN_ERRORS, ConnectionInterrupted)

RETRY_AFTER_SECONDS = 5
#: What a client that is not staff reads: no host, no port, no driver message.
PUBLIC_DETAIL = "Redis is unavailable"


def is_staff(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_active and user.is_staff)


def wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or "json" in request.headers.get("Accept", "")


class RedisUnavailableMiddleware:
    """Turns "Redis is down" raised in a view into a 503."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, REDIS_DOWN_ERRORS):
            return None
        detail = str(exception) if isinstance(exception, RedisUnavailable) else f"Redis is unavailable: {exception}"
        logger.warning("%s %s answered 503: %s", request.method, request.path, detail)
        if not is_staff(request):
            detail = PUBLIC_DETAIL  # where Redis lives is for operators, not for every client
        response: HttpResponse
        if wants_json(request):
            response = JsonResponse({"error": "redis_unavailable", "detail": detail}, status=503)
        else:
            response = HttpResponse(
                f"503 Service Unavailable: {detail}. Try again in a few seconds.\n", status=503, content_type="text/plain; charset=utf-8"
            )
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
