"""Mirrors ``celery.backends``: results are the engine's result store (``jobsapp.results``)."""
