"""Who may read which task, whatever the project's DRF defaults say.

The tracking API sets its own permission (``TrackingAccess``) instead of inheriting
``REST_FRAMEWORK["DEFAULT_PERMISSION_CLASSES"]``, whose DRF default is ``AllowAny``: an
anonymous caller is refused (401/403) before any query. ``visible_tasks`` is the one scoping rule
of the API and the progress page: a user sees the tasks they own; a task with no owner (launched
from a shell, cron or a job) is visible to active staff only. ``AnonymousUser.pk`` is None, so a
plain ``owner_id=user.pk`` filter would hand every ownerless task to anyone not logged in: never
filter on the primary key of a user who is not authenticated.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from rest_framework.permissions import BasePermission


def is_staff(user: Any) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active and user.is_staff)


def visible_tasks(user: Any, *, through: str = "") -> Q:
    """The ``Task`` filter of what ``user`` may see (matches nothing for an anonymous user).

    ``through="task__"`` gives the same rule for a model that points at a task (``Event``).
    """
    if user is None or not user.is_authenticated or user.pk is None:
        return Q(**{f"{through}pk__in": []})
    mine = Q(**{f"{through}owner_id": user.pk})
    if is_staff(user):
        return mine | Q(**{f"{through}owner__isnull": True})
    return mine


def visible_tasks_sql(user: Any, alias: str) -> tuple[str, list[Any]] | None:
    """``visible_tasks`` as a SQL condition on the task table named ``alias``, with its
    parameters (for a statement of fixed text: ``tracking.summary``); None for a user who may see
    nothing (anonymous)."""
    if user is None or not user.is_authenticated or user.pk is None:
        return None
    if is_staff(user):
        return f"({alias}.owner_id = %s OR {alias}.owner_id IS NULL)", [user.pk]
    return f"{alias}.owner_id = %s", [user.pk]


class TrackingAccess(BasePermission):
    """Authenticated callers only; which tasks they see is ``visible_tasks``'s business."""

    message = "Authentication credentials were not provided."

    def has_permission(self, request: Any, view: Any) -> bool:
        user = getattr(request, "user", None)
        return bool(user is not None and user.is_authenticated and user.is_active)
