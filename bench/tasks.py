"""No-op jobs of every shape the results overhead benchmark drains (autodiscovered like jobs.py)."""

from __future__ import annotations

import time

import jobsapp
from bench.jobs import USER_REDIS, spin_for_seconds
from jobsapp import Job, sidekiq_options
from jobsapp.celery import shared_task


@sidekiq_options(retry=False, retain=600)
class RetainedNoopJob(Job):
    def perform(self, *args):
        return None


@jobsapp.job(retry=False)
def noop_function(*args):
    return None


@shared_task
def celery_noop(*args):
    return None


@shared_task
def cancel_probe(token, seconds):
    """``bench.jobs.CancelProbe`` as a Celery-style task, for ``revoke(terminate=True)``."""
    try:  # the cancel may land as this write returns: the finally still notes the stop
        USER_REDIS.hset("bench:cancel:started", token, time.time())
        spin_for_seconds(seconds)
    finally:
        USER_REDIS.hset("bench:cancel:stopped", token, time.time())
    USER_REDIS.hset("bench:cancel:done", token, 1)
