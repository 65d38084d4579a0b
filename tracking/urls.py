"""Tracking routes: the JSON API under api/, its OpenAPI schema, and the progress page."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import SimpleRouter

from . import views

app_name = "tracking"

router = SimpleRouter()
router.register("api/tasks", views.TaskViewSet, basename="task")
router.register("api/events", views.EventViewSet, basename="event")

urlpatterns = [
    path("", include(router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("tasks/<str:task_id>/", views.task_page, name="task-page"),
]
