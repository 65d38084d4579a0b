"""Upstream test material (Django's ``tests/tasks/``, Celery's examples and guides) ported to
jobsapp and run against a real ``runworkers``; each suite notes its source in UPSTREAM.md."""
