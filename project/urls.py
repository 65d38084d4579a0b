"""URL routes of the demo project: the admin, and each app's own urls."""

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
