"""Settings of the benchmark Django project: production-like (DEBUG off), SQLite."""

import os

DB_PATH = os.environ.get("DJANGO_BENCH_DB", "/tmp/pyserver-bench-django.sqlite3")

SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["benchmarks.apps.django_bench.apps.BenchConfig"]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
]
ROOT_URLCONF = "benchmarks.apps.django_bench.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DB_PATH}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
LOGGING_CONFIG = None
