"""The worker's way to the ported tasks: autodiscovery imports this module, which imports them.

The class-based task is registered here, as Celery's conftest registers it with the session app
(its ``celery_class_tasks`` fixture), so the worker process defines it too.
"""

from jobsapp.celery import Celery

from .port import importable

importable()  # ported/ is the root of the suite's imports, as t/'s parent is in Celery's repository

from t.integration import tasks  # noqa: E402  (importable only once its root is on the path)

Celery("celery.tests").register_task(tasks.ClassBasedAutoRetryTask)
