"""Who may see the dashboard, and what a visitor sees when Redis is down.

``staff_view`` wraps every dashboard view: an anonymous visitor is redirected to a login page that
exists (``jobsapp.login``: ``settings.LOGIN_URL`` when the project set it, else the admin's login),
a signed-in user who is not ``is_staff`` gets 403, and a ``RedisUnavailable`` raised anywhere in
the view becomes a 503 page (JSON for the polling endpoint), never a 500. Mutations are separate
POST-only views. Every view is wrapped in ``csrf_protect`` (as Django's admin is), so a POST
without the token of a dashboard page is refused with 403 even in a project that removed
``CsrfViewMiddleware`` (API-only projects do), and the pages set the CSRF cookie their forms need.
With ``JOBSAPP["SHARDS"]`` every view runs against the shard picked with ``?shard=NAME``
(remembered in the session; an unknown name answers 400).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.template.response import TemplateResponse
from django.views.decorators.csrf import csrf_protect

from .. import shards
from ..errors import RedisUnavailable, UnknownShard
from ..login import to_login

logger = logging.getLogger("jobsapp.dashboard")

View = Callable[..., HttpResponse]

#: Where the dashboard remembers the shard picked with ?shard=NAME.
SHARD_SESSION_KEY = "jobsapp_shard"


def unavailable_response(request: HttpRequest, error: RedisUnavailable, *, as_json: bool = False) -> HttpResponse:
    """503 with the reason; the page keeps the navigation so the operator can retry."""
    logger.warning("dashboard: %s", error)
    if as_json:
        return JsonResponse({"error": "redis_unavailable", "detail": str(error)}, status=503)
    response = TemplateResponse(request, "jobsapp/unavailable.html", {"error": str(error)}, status=503)
    response.render()
    return response


def chosen_shard(request: HttpRequest) -> str:
    """The shard (``JOBSAPP["SHARDS"]``) this request looks at: ``?shard=NAME``, remembered in
    the session for the next pages and actions; else the one remembered; else "default"."""
    session = getattr(request, "session", None)
    name = request.GET.get("shard")
    if name:
        shards.validate(name)
        if session is not None:
            session[SHARD_SESSION_KEY] = name
        return name
    remembered = session.get(SHARD_SESSION_KEY) if session is not None else None
    if remembered and remembered in shards.names():  # a shard since removed from settings: the default
        return str(remembered)
    return shards.DEFAULT


def staff_view(view: View | None = None, *, as_json: bool = False) -> Any:
    """Decorator: CSRF checked on unsafe methods (whatever the project's middleware), staff
    only (anonymous -> login, others -> 403); Redis down -> 503."""

    def decorate(function: View) -> View:
        @functools.wraps(function)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            user = request.user
            if not user.is_authenticated:
                return to_login(request)
            if not (user.is_active and user.is_staff):
                raise PermissionDenied("the jobs dashboard is for staff users")
            try:
                shard = chosen_shard(request)
            except UnknownShard as error:
                return HttpResponseBadRequest(str(error), content_type="text/plain; charset=utf-8")
            try:
                with shards.using(shard):
                    response = function(request, *args, **kwargs)
                    if isinstance(response, TemplateResponse) and not response.is_rendered:
                        response.render()  # so a Redis error inside a lazy template still answers 503
                return response
            except RedisUnavailable as error:  # nothing was changed: api calls are atomic
                return unavailable_response(request, error, as_json=as_json)

        return csrf_protect(wrapper)

    return decorate(view) if view is not None else decorate
