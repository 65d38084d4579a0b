"""The worker's way to the ported tasks: autodiscovery imports this module, which imports them.

The class-based task is registered here, as Celery's conftest registers it with the session app
(its ``celery_class_tasks`` fixture), so the worker process defines it too.
"""

from jobsapp.celery import Celery

from .ported import tasks as tasks

Celery("celery.tests").register_task(tasks.ClassBasedAutoRetryTask)
