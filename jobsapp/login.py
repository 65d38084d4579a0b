"""Where an anonymous visitor of a staff page goes: a login page that exists.

Shared by the engine's dashboard (``jobsapp.dashboard.access``) and any app built on the engine
(``tracking.views``' progress page): ``settings.LOGIN_URL`` when the project set it, else the
admin's login (Django's default ``/accounts/login/`` is a 404 in a fresh project), coming back to
the page afterwards. Public: ``jobsapp.login.to_login(request)``.

Web requests only: no thread, no Redis. It imports ``django.contrib.auth.views``, so it is
imported once the app registry is ready (by views), never by the engine's package itself.
"""

from __future__ import annotations

from django.conf import global_settings, settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse

__all__ = ["login_url", "to_login"]


def login_url() -> str:
    """Where to send an anonymous visitor: the project's ``LOGIN_URL`` when it set one, else the
    admin's login (Django's default ``/accounts/login/`` is a 404 in a fresh project)."""
    configured = str(settings.LOGIN_URL)
    if configured != global_settings.LOGIN_URL:
        return configured
    try:
        return reverse("admin:login")
    except NoReverseMatch:  # no admin URLs: Django's default it is
        return configured


def to_login(request: HttpRequest) -> HttpResponse:
    """The redirect to ``login_url()``, coming back to this page afterwards."""
    return redirect_to_login(request.get_full_path(), login_url())
