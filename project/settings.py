"""Settings for the demo project around jobsapp and tracking.

Glue only. Two environment variables matter (shared/DESIGN.md §4):
REDIS_URL (default redis://127.0.0.1:6379/0) and DATABASE_URL (default SQLite).
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "dev-only-not-secret-change-me-in-production-0123456789")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "jobsapp",
    "tracking",
    "fixtures",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "jobsapp.http.RedisUnavailableMiddleware",  # Redis down: 503 with a reason, never a 500
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "project.wsgi.application"

DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_max_age=60,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers and one writer work at once; the busy timeout makes a writer wait
    # for the lock instead of failing with "database is locked" under 10 worker threads.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
        "KEY_PREFIX": "cache",
    }
}

JOBSAPP = {
    "REDIS_URL": REDIS_URL,
    # $REDIS_CLUSTER=1: REDIS_URL names a node of a Redis Cluster (docs/operations/cluster.md)
    "REDIS_CLUSTER": os.environ.get("REDIS_CLUSTER", "") in ("1", "true", "yes"),
    # $REDIS_CLUSTER_PARTITIONS=3: each queue spread over 3 partitions of the cluster (one per master)
    "CLUSTER_PARTITIONS": int(os.environ.get("REDIS_CLUSTER_PARTITIONS") or 1),
    # Task tracking records jobs declared with sidekiq_options(use_task_event=True); others cost nothing.
    "CLIENT_MIDDLEWARE": ["tracking.middleware.TrackingClientMiddleware"],
    "SERVER_MIDDLEWARE": ["tracking.middleware.TrackingServerMiddleware"],
}

# Task tracking (tracking/conf.py has every key and its default).
TRACKING = {
    "API_THROTTLE_RATE": os.environ.get("TRACKING_API_THROTTLE_RATE", "1200/min"),
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/admin/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# jobsapp's handler and formatter (docs/workers.md, "What the per-job lines cost"): a worker's two
# lines per job are written in batches, every other line at once; a job's own lines name the job.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"job": {"()": "jobsapp.logs.JobContextFilter"}},
    "formatters": {"plain": {"()": "jobsapp.logs.TextFormatter"}},
    "handlers": {"console": {"class": "jobsapp.logs.BufferedStreamHandler", "filters": ["job"], "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django": {"level": "WARNING"}},
}
