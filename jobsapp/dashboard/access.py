"""Who may see the dashboard, and what a visitor sees when Redis is down.

``staff_view`` wraps every dashboard view: an anonymous visitor is redirected to the login page
(``settings.LOGIN_URL``, with ``next``), a signed-in user who is not ``is_staff`` gets 403, and a
``RedisUnavailable`` raised anywhere in the view becomes a 503 page (JSON for the polling
endpoint), never a 500. Mutations are separate POST-only views; Django's CSRF middleware checks
their tokens before the view runs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse

from ..errors import RedisUnavailable

logger = logging.getLogger("jobsapp.dashboard")

View = Callable[..., HttpResponse]


def unavailable_response(
    request: HttpRequest, error: RedisUnavailable, *, as_json: bool = False
) -> HttpResponse:
    """503 with the reason; the page keeps the navigation so the operator can retry."""
    logger.warning("dashboard: %s", error)
    if as_json:
        return JsonResponse({"error": "redis_unavailable", "detail": str(error)}, status=503)
    response = TemplateResponse(request, "jobsapp/unavailable.html", {"error": str(error)}, status=503)
    response.render()
    return response


def staff_view(view: View | None = None, *, as_json: bool = False) -> Any:
    """Decorator: staff only (anonymous -> login, others -> 403); Redis down -> 503."""

    def decorate(function: View) -> View:
        @functools.wraps(function)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            user = request.user
            if not user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not (user.is_active and user.is_staff):
                raise PermissionDenied("the jobs dashboard is for staff users")
            try:
                response = function(request, *args, **kwargs)
                if isinstance(response, TemplateResponse) and not response.is_rendered:
                    response.render()  # so a Redis error inside a lazy template still answers 503
                return response
            except RedisUnavailable as error:  # nothing was changed: api calls are atomic
                return unavailable_response(request, error, as_json=as_json)

        return wrapper

    return decorate(view) if view is not None else decorate
