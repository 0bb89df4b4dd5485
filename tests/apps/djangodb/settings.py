"""A Django project on PostgreSQL for the --threads tests: the database comes from the
environment (PGHOST: the server's socket directory, PGPORT), as tests/test_threads.py's
temporary cluster sets it."""

import os

SECRET_KEY = "pyserver-tests-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "apps.djangodb.urls"
INSTALLED_APPS = []
MIDDLEWARE = []
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "HOST": os.environ.get("PGHOST", ""),
        "PORT": os.environ.get("PGPORT", ""),
        "CONN_MAX_AGE": 0,  # closed at the end of each request, on its thread
    }
}
TEMPLATES = []
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
