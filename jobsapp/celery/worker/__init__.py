"""Mirrors ``celery.worker``: ``state`` and ``control``, as far as a separate worker process allows."""
