"""``celery.contrib``: the parts of Celery's contrib package that Celery projects' tests use."""
