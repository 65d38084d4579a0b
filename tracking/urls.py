"""Tracking API and progress page routes."""

from django.urls import path  # noqa: F401

app_name = "tracking"
urlpatterns: list = []
