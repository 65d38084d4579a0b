from django.apps import AppConfig


class BenchConfig(AppConfig):
    """The benchmark's jobs (bench/jobs.py), installed only by bench/settings.py."""

    name = "bench"
    label = "bench"
