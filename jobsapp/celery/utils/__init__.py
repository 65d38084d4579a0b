"""Mirrors ``celery.utils``: only ``log`` (``get_task_logger``)."""
