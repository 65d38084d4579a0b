"""``celery.contrib.testing.tasks``: the ``celery.ping`` task ``start_worker`` runs to know its worker takes tasks."""

from __future__ import annotations

from ...decorators import shared_task


@shared_task(name="celery.ping")
def ping() -> str:
    """Answers ``"pong"``: a round trip through the queue and the worker."""
    return "pong"
