"""Settings for the ASGI test project: production-like (DEBUG off), no database, no templates.

A project of its own rather than apps.djangoproj, so that its async views stay apart from
the WSGI suite."""

SECRET_KEY = "pyserver-asgi-tests-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "apps.asgi_djangoproj.urls"
INSTALLED_APPS = []
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
DATABASES = {}
TEMPLATES = []
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
