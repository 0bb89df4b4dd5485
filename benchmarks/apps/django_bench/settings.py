"""Settings of the benchmark Django project: production-like (DEBUG off), SQLite, or
PostgreSQL when DJANGO_BENCH_PG=HOST:PORT (the django-wsgi-db scenario's throwaway cluster,
user `bench`, database `postgres`, one persistent connection per thread)."""

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
if os.environ.get("DJANGO_BENCH_PG"):
    _host, _port = os.environ["DJANGO_BENCH_PG"].rsplit(":", 1)
    DATABASES["default"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "bench",
        "HOST": _host,
        "PORT": _port,
        # Under ASGI every request runs its sync code in a thread of its own
        # (asgiref's thread-sensitive context), so a persistent connection
        # would be one per request left open: Django's documentation says to
        # turn them off there, and so does this project.
        "CONN_MAX_AGE": 0 if os.environ.get("DJANGO_BENCH_ASGI") else 600,
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
LOGGING_CONFIG = None
# The django-channels scenario's consumer (channels_asgi.py); one worker process, so the
# in-memory layer reaches every member. Its capacity: messages a slow client may have queued.
CHANNEL_LAYERS = {
    "default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 1000}}
}
