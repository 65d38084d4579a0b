"""URL routes of the demo project: the admin, the jobs dashboard, and the tracking API and pages."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("jobs/", include("jobsapp.urls")),
    path("", include("tracking.urls")),
]
