"""Settings of the example project, from the environment (django-environ).

With DATABASE_URL unset, an embedded PostgreSQL starts (data in .dsched-data/pg).
"""

from __future__ import annotations

import os

import environ

env = environ.Env(DEBUG=(bool, True))

if not os.environ.get("DATABASE_URL"):
    from example_project.embedded_db import database_url

    os.environ["DATABASE_URL"] = database_url()

SECRET_KEY = env.str("SECRET_KEY", default="example-project-not-secret")
DEBUG = env("DEBUG")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
USE_TZ = True
TIME_ZONE = env.str("TIME_ZONE", default="UTC")

DATABASES = {"default": env.db("DATABASE_URL")}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django.contrib.postgres",  # django-dsched's tables use its ArrayField
    "django_dsched",
    "example_project.demo",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "example_project.urls"
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
            ]
        },
    }
]
WSGI_APPLICATION = "example_project.wsgi.application"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DSCHED_LEASE_SECONDS = env.float("DSCHED_LEASE_SECONDS", default=5.0)
DSCHED_HEARTBEAT_SECONDS = env.float("DSCHED_HEARTBEAT_SECONDS", default=1.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"django_dsched": {"handlers": ["console"], "level": "INFO"}},
}
