"""Dashboard routes, mounted under /jobs/ by the project (``app_name`` "jobsapp").

GET pages first, then the POST-only action endpoints, then metrics. Queue names may hold any
character, so a queue page takes the rest of the path.
"""

from django.urls import path

from .dashboard import actions, metrics, pages

app_name = "jobsapp"
urlpatterns = [
    path("", pages.overview, name="overview"),
    path("stats.json", pages.stats_json, name="stats_json"),
    path("queues/", pages.queues, name="queues"),
    path("queues/<path:name>", pages.queue, name="queue"),
    path("busy/", pages.busy, name="busy"),
    path("jobs/<str:jid>/", pages.job, name="job"),
    path("sets/<slug:slug>/", pages.job_set, name="job_set"),
    path("completed/", pages.completed, name="completed"),
    path("periodic/", pages.periodic, name="periodic"),
    path("limits/", pages.limits, name="limits"),
    path("batches/", pages.batches, name="batches"),
    path("batches/<str:bid>/", pages.batch, name="batch"),
    path("actions/queue", actions.queue_action, name="queue_action"),
    path("actions/process", actions.process_action, name="process_action"),
    path("actions/cancel", actions.cancel_action, name="cancel_action"),
    path("actions/sets/<slug:slug>", actions.set_action, name="set_action"),
    path("actions/periodic", actions.periodic_action, name="periodic_action"),
    path("metrics", metrics.metrics, name="metrics"),
]
