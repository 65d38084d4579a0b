"""A URLconf with the jobs dashboard and no admin, for the login-page check (jobsapp.W001)."""

from django.urls import include, path

urlpatterns = [path("jobs/", include("jobsapp.urls"))]
