"""No-op jobs of every shape the results overhead benchmark drains (autodiscovered like jobs.py)."""

from __future__ import annotations

import jobsapp
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
