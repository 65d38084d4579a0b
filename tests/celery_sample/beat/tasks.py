"""A Celery app whose ``beat_schedule`` runs ``tick`` every second (tests/jobsapp/test_celery_task_api.py)."""

from jobsapp.celery import Celery
from jobsapp.celery.schedules import schedule
from jobsapp.connection import get_redis

app = Celery("beat-sample")


@app.task(name="beat-sample.tick")
def tick(label):
    get_redis().rpush("celery-sample:ticks", label)


app.conf.beat_schedule = {"tick-every-second": {"task": "beat-sample.tick", "schedule": schedule(1), "args": ("tick",)}}
