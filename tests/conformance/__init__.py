"""Upstream test material (Django's ``tests/tasks/``, django-tasks-rq's tests, Celery's examples
and guides) run against jobsapp on a real ``runworkers``. The material itself is not here: each
suite takes it from the pinned sdists at test time (upstream.py) and ports it with its own edits."""
