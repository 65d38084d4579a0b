"""Celery's own integration suite, ported at test time and run on a real worker (conftest.py)."""
