"""Settings for the test suite: a real PostgreSQL, from DATABASE_URL or the embedded server."""

from __future__ import annotations

import os

import environ

if not os.environ.get("DATABASE_URL"):
    from example_project.embedded_db import database_url

    os.environ["DATABASE_URL"] = database_url(name="pg-test", database="dsched")

env = environ.Env()

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

DATABASES = {"default": env.db("DATABASE_URL")}
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("DSCHED_TEST_DB_NAME", "test_dsched")}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django.contrib.postgres",
    "django_dsched",
    # The Celery transport's worker-side dedupe, and the importer's source tables.
    "django_dsched.contrib.celery",
    "django_celery_beat",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Short leases so failover tests finish quickly.
DSCHED_LEASE_SECONDS = 3.0
DSCHED_HEARTBEAT_SECONDS = 0.5
DSCHED_POLL_INTERVAL = 1.0
DSCHED_STANDBY_INTERVAL = 0.2
# Cluster tests start instances with buckets (DSCHED_TEST_BUCKETS); the suite runs with one.
DSCHED_BUCKETS = int(os.environ.get("DSCHED_TEST_BUCKETS", "1"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_dsched": {"handlers": ["console"], "level": "INFO"}},
}

# A second alias only for the system check that refuses non-PostgreSQL databases.
DATABASES["sqlite"] = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}

# The suite's schedules belong to many hosts (tenants): its default route serves them all.
# A project's default serves the operator's host alone (docs/delivery.md, "Tenants").
DSCHED_TRANSPORTS = {"*": {"BACKEND": "handlers", "HOSTS": "*"}}
