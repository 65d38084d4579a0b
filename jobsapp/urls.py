"""Dashboard routes, mounted under /jobs/ by the project."""

from django.urls import path  # noqa: F401

app_name = "jobsapp"
urlpatterns: list = []
