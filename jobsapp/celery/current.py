"""What this process has defined: the Celery-style tasks by name, and the current app.

A leaf module (it imports nothing of the package), so every other module may read it.
``Celery(...)`` makes each new app the current one, as Celery does; ``default_app`` makes one when
none was (set by app.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

tasks_lock = threading.Lock()
#: The tasks defined in this process, by name.
tasks: dict[str, Any] = {}

_apps: list[Any] = []
#: Makes the default app when code asks for one before any was made (set by app.py).
default_app: Callable[[], Any] | None = None


def set_current_app(app: Any) -> None:
    """Make ``app`` the current one (None: there is none until the next ``Celery(...)``)."""
    _apps[:] = [app] if app is not None else []


def current_app() -> Any:
    """The app made last in this process, or None."""
    return _apps[-1] if _apps else None


def current_or_default_app() -> Any:
    """The current app, a default one made when there is none (as Celery's ``current_app``)."""
    app = current_app()
    if app is None and default_app is not None:
        app = default_app()
    return app
